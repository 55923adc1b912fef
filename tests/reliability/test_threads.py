"""Threads on the host backend: 8 threads share jitted functions with mixed shapes while graphs
are captured, evicted and cleared under them.

No deadlock (every thread joined within a timeout; the threads are daemons so a hang fails the
test instead of the run), every result right, and the statistics add up across threads.
Default: 8 x 200 calls; ``--soak``: 8 x 2 000. The GPU variant (per-thread non-blocking streams)
is ``test_threads_gpu.py``.
"""

from __future__ import annotations

import threading

import numpy as np
from reliability_helpers import check_stats, record
from replay_helpers import run_threads as shared_run_threads

import cupygraph as cg

THREADS = 8
TIMEOUT_S = 120


def rowwise(x):
    return np.tanh(x) * 3 + x.sum(axis=1, keepdims=True)


def causal(x, w):
    return np.cumsum(x * w, axis=0)  # mixes rows, but only forward: padding rows cannot reach real ones


def run_threads(target, count: int = THREADS) -> list[BaseException]:
    return shared_run_threads(target, count, TIMEOUT_S)


def test_eight_threads_share_functions_while_graphs_come_and_go(soak):
    calls = 2_000 if soak else 200
    config = dict(backend="host", capture_sizes=[1, 2, 4, 8, 16, 32], max_cached_graphs=5)
    f = cg.jit(rowwise, config=config)
    g = cg.jit(causal, config=dict(config, eviction="lfu", max_cached_graphs=3), constant_argnums=(1,))
    weights = {width: np.random.default_rng(width).standard_normal(width) for width in (3, 4, 7)}
    counts = {"f": [0] * THREADS, "g": [0] * THREADS}

    def worker(t: int) -> None:
        rng = np.random.default_rng(t)
        for i in range(calls):
            width = (3, 4, 7)[int(rng.integers(3))]
            x = rng.standard_normal((int(rng.integers(1, 40)), width))  # above 32 runs eagerly
            if rng.random() < 0.5:
                got, want = f(x), rowwise(x)
                counts["f"][t] += 1
            else:
                got, want = g(x, weights[width]), causal(x, weights[width])
                counts["g"][t] += 1
            if not np.array_equal(got, want):
                raise AssertionError(f"thread {t} call {i}: wrong result for {x.shape}")
            if t == 0 and i % 50 == 25:
                f.clear()  # every graph goes while the other threads replay
            if t == 1 and i % 40 == 10:
                f.warmup(x, sizes=[16, 8], progress=False)  # captures on demand, from another thread

    errors = run_threads(worker)
    assert not errors, errors[0]
    check_stats(f, sum(counts["f"]))
    check_stats(g, sum(counts["g"]))
    assert f.registry.num_graphs() <= 5 and g.registry.num_graphs() <= 3
    record("threads", f"host {THREADS} threads x {calls} calls, clears and warm-ups", cases=THREADS * calls,
           evictions=f.stats().evictions + g.stats().evictions)


def test_a_slow_capture_blocks_only_its_own_function():
    """While one function captures (its family's lock held), other functions keep replaying."""
    capturing, release = threading.Event(), threading.Event()

    def slow(x):
        if x.shape[0] == 8 and not release.is_set():
            capturing.set()
            release.wait(120)
        return x * 2

    f = cg.jit(slow, config=dict(backend="host", capture_sizes=[4, 8], num_warmups=0))
    g = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=[4]))
    x4 = np.ones((4, 3))
    g(x4)
    capturer = threading.Thread(target=lambda: f(np.ones((8, 3))), daemon=True)
    capturer.start()
    try:
        assert capturing.wait(120)  # a hang guard, not a speed limit
        for _ in range(200):
            assert np.array_equal(g(x4), x4 + 1)
        # Had g waited for f's lock, it could only have finished after f's capture ended.
        assert capturer.is_alive(), "g's replays waited for f's capture"
        assert g.stats().hits == 200
    finally:
        release.set()
        capturer.join(10)
    assert not capturer.is_alive()
    assert np.array_equal(f(np.ones((8, 3))), np.full((8, 3), 2.0))


def test_replays_and_captures_of_one_family_interleave_without_losing_calls(soak):
    """Every thread calls one function with its own size: captures of new sizes (and the evictions
    they cause, max_cached_graphs=2) happen while the other threads replay."""
    calls = 1_000 if soak else 100
    f = cg.jit(rowwise, config=dict(backend="host", capture_sizes=[1, 2, 3, 4, 5, 6, 7, 8], max_cached_graphs=2))

    def worker(t: int) -> None:
        rng = np.random.default_rng(100 + t)
        for i in range(calls):
            x = rng.standard_normal((t + 1, 5))
            if not np.array_equal(f(x), rowwise(x)):
                raise AssertionError(f"thread {t} call {i}")

    errors = run_threads(worker)
    assert not errors, errors[0]
    check_stats(f, THREADS * calls)
    assert f.stats().evictions > 0
