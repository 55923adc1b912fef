"""Threads on the GPU: 8 threads, each on its own non-blocking stream, share jitted functions with
mixed shapes while graphs are captured, evicted and cleared under them. No deadlock (joined with
a timeout), results bit for bit against eager on the same stream, stats consistent.
Default 8 x 200 calls; ``--soak`` 8 x 2 000."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from reliability_gpu import drift, memory_figures  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402

import cupygraph as cg  # noqa: E402

THREADS = 8
TIMEOUT_S = 300


def rowwise(x):
    return cupy.tanh(x) * 3 + x[:, :1]


def scaled(x, w):
    return x * w + 1


def test_eight_threads_on_their_own_streams(soak):
    calls = 2_000 if soak else 200
    f = cg.jit(rowwise, config=dict(capture_sizes=[1, 2, 4, 8, 16, 32], max_cached_graphs=5))
    g = cg.jit(scaled, config=dict(capture_sizes=[4, 16, 32], eviction="lfu", max_cached_graphs=3),
               constant_argnums=(1,))
    weights = {width: cupy.asarray(np.random.default_rng(width).standard_normal(width).astype(np.float32))
               for width in (32, 48, 96)}
    counts = {"f": [0] * THREADS, "g": [0] * THREADS}

    def run(calls: int, seed: int) -> None:
        errors: list[BaseException] = []
        barrier = threading.Barrier(THREADS)

        def worker(t: int) -> None:
            rng = np.random.default_rng(seed + t)
            stream = cupy.cuda.Stream(non_blocking=True)
            try:
                barrier.wait(timeout=60)
                with stream:
                    for i in range(calls):
                        width = (32, 48, 96)[int(rng.integers(3))]
                        x = cupy.asarray(rng.standard_normal((int(rng.integers(1, 40)), width)).astype(np.float32))
                        if rng.random() < 0.5:
                            got, want = f(x), rowwise(x)
                            counts["f"][t] += 1
                        else:
                            got, want = g(x, weights[width]), scaled(x, weights[width])
                            counts["g"][t] += 1
                        stream.synchronize()
                        if not np.array_equal(cupy.asnumpy(got), cupy.asnumpy(want)):
                            raise AssertionError(f"thread {t} call {i}: wrong result for {x.shape}")
                        if t == 0 and i % 50 == 25:
                            f.clear()
                        if t == 1 and i % 40 == 10:
                            f.warmup(x, sizes=[16, 8], progress=False)
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + TIMEOUT_S
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert not errors, errors[0]

    run(50, seed=1000)  # warm: kernels compiled, per-thread CuPy state and pools made
    before = memory_figures()
    run(calls, seed=0)
    check_stats(f, sum(counts["f"]))
    check_stats(g, sum(counts["g"]))
    f.clear()
    g.clear()
    growth = drift(before, memory_figures())
    record("threads", f"gpu {THREADS} threads x {calls} calls on own streams", backend="cupy",
           cases=THREADS * calls, drift=growth)
    assert growth["python_objects"] < 5_000, growth  # a few hundred seen per 8 000 calls: no per-call growth
