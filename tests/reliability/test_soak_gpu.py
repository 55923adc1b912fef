"""Soak on the GPU: replays of a small graph keep device memory, host memory and Python objects
flat. Default 20 000 replays per mode, ``--soak`` 1 000 000. The drift figures are printed and
appended to ``$CUPYGRAPH_RELIABILITY_OUT``."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from reliability_gpu import assert_same, drift, memory_figures, rand  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402

import cupygraph as cg  # noqa: E402

_STEP = r'''
extern "C" __global__ void step(const float* u, float* v, long long n, float a) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) v[i] = u[i] + a * (1.0f - u[i] * u[i]);
}
'''


def small_graph():
    kernel = cupy.RawKernel(_STEP, "step")

    def run(u):
        src = u
        for _ in range(4):
            dst = cupy.empty_like(src)
            kernel(((src.size + 255) // 256,), (256,), (src, dst, np.int64(src.size), np.float32(0.01)))
            src = dst
        return src

    return run


@pytest.mark.parametrize("mode", ["copy", "view"])
def test_replays_keep_memory_and_objects_flat(mode, soak):
    replays = 1_000_000 if soak else 20_000
    rng = np.random.default_rng(0)
    fn = small_graph()
    f = cg.jit(fn, config=dict(capture_sizes=[4, 8], output_mode=mode))
    xs = [rand(rng, 3, 1024), rand(rng, 7, 1024)]
    for i in range(2_000):  # warm: both graphs captured, caches and pools filled
        f(xs[i % 2])
    cupy.cuda.Device().synchronize()
    backend = f.registry.backend
    before = memory_figures(backend)
    for i in range(replays):
        out = f(xs[i % 2])
        if i % 100_000 == 0:
            cupy.cuda.Device().synchronize()  # keep the queue bounded
    cupy.cuda.Device().synchronize()
    del out
    after = memory_figures(backend)
    assert_same(f(xs[0]), fn(xs[0]))
    check_stats(f, 2_000 + replays + 1)
    growth = drift(before, after)
    record("soak", f"gpu {replays} replays ({mode})", backend="cupy", cases=replays, drift=growth,
           objects_per_call=round(growth["python_objects"] / replays, 6))
    assert growth["family_pool_bytes"] == 0 and growth["family_pool_total"] == 0, growth
    assert growth["default_pool_total"] <= 0 and growth["default_pool_used"] <= 0, growth
    assert growth["python_objects"] < 200, growth
    assert growth["rss"] < 64 * 2**20, growth
