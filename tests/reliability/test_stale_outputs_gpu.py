"""Stale view outputs on the GPU (``output_mode="view"``, ``debug=True``): the same detection as on
the host (``test_stale_outputs.py``), with CuPy arrays, RawKernels and detached static outputs."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from reliability_gpu import assert_same, rand  # noqa: E402
from reliability_helpers import record  # noqa: E402

import cupygraph as cg  # noqa: E402

DEBUG_VIEW = dict(capture_sizes=[4, 8], output_mode="view", debug=True)

_AFFINE = r'''
extern "C" __global__ void affine(const float* x, float* y, long long n, float a, float b) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
'''


def kernel_pipeline():
    affine = cupy.RawKernel(_AFFINE, "affine")

    def run(x):
        y = cupy.empty_like(x)
        affine(((x.size + 255) // 256,), (256,), (x, y, np.int64(x.size), np.float32(3.0), np.float32(1.0)))
        return y, y.sum(axis=1)

    return run


def test_views_read_after_a_replay_are_reported_on_the_gpu():
    rng = np.random.default_rng(0)
    fn = kernel_pipeline()
    f = cg.jit(fn, config=DEBUG_VIEW)
    x1, x2 = rand(rng, 3, 64), rand(rng, 3, 64)
    f(x1)  # the call that captures returns its own eager result, which the caller owns
    y1, s1 = f(x1)
    cg.check_fresh(y1, s1)
    assert_same(y1, fn(x1)[0])
    y2, _ = f(x2)
    for stale in (y1, s1):
        with pytest.raises(cg.StaleOutputError, match="rewritten 1 time"):
            cg.check_fresh(stale)
    cg.check_fresh(y2)
    assert_same(y1, fn(x2)[0])  # what the error protects against
    with pytest.raises(cg.StaleOutputError, match="argument 0"):
        f(y1)
    f(rand(rng, 7, 64))  # another size of the family: captured (its warm-up writes the family's buffers)
    with pytest.raises(cg.StaleOutputError, match="rewritten 1 time"):
        cg.check_fresh(y2)
    record("stale_outputs", "gpu view outputs after replays", backend="cupy", cases=6)


def test_fresh_views_fed_back_are_read_before_the_replay_rewrites_them():
    rng = np.random.default_rng(1)
    fn = lambda x: x * 2 - 1
    f = cg.jit(fn, config=DEBUG_VIEW)
    y = f(rand(rng, 4, 32))
    want = fn(y.copy())
    assert_same(f(y), want)


def test_copy_mode_outputs_survive_later_calls_on_the_gpu():
    rng = np.random.default_rng(2)
    fn = kernel_pipeline()
    f = cg.jit(fn, config=dict(DEBUG_VIEW, output_mode="copy"))
    x1 = rand(rng, 3, 64)
    kept = f(x1)
    for _ in range(5):
        f(rand(rng, 3, 64))
    cg.check_fresh(*kept)
    assert_same(kept[0], fn(x1)[0])
