"""Differential fuzzing on the GPU, bounded: random pipelines of CuPy ufuncs and a RawKernel,
random configs and call sequences; every replay equals eager (bit for bit unless the pipeline
sums over the batch), stats add up. 30 examples by default, 300 with ``--soak``. The broad
version runs on the host backend (``test_fuzz_host.py``)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402

import cupygraph as cg  # noqa: E402

_AFFINE = r'''
extern "C" __global__ void affine(const float* x, float* y, long long n, float a, float b) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
'''
_KERNEL = {}


def _affine(x):
    if x.dtype != cupy.float32:
        return x * 3 + 1
    kernel = _KERNEL.setdefault("affine", cupy.RawKernel(_AFFINE, "affine"))
    x = cupy.ascontiguousarray(x)  # a RawKernel reads memory in order: strided views must be copied
    y = cupy.empty_like(x)
    if x.size:
        kernel(((x.size + 255) // 256,), (256,), (x, y, np.int64(x.size), np.float32(3.0), np.float32(1.0)))
    return y


OPS = {
    "affine_kernel": (_affine, False),
    "square": (lambda x: x * x, True),
    "neg": (cupy.negative, True),
    "relu": (lambda x: cupy.maximum(x, 0), True),
    "sin": (cupy.sin, True),
    "flip": (lambda x: x[:, ::-1] if x.ndim > 1 else x, True),
    "identity": (lambda x: x, True),
}


def make(names, sums):
    ops = [OPS[n][0] for n in names]

    def pipeline(x):
        y = x * 2
        for op in ops:
            y = op(y)
        if sums:
            y = y + y.sum(axis=0, keepdims=True)
        return y

    return pipeline


@st.composite
def cases(draw):
    names = draw(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=4))
    zero_preserving = all(OPS[n][1] for n in names)
    sums = zero_preserving and draw(st.booleans())
    config = dict(
        mode=draw(st.sampled_from(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "NONE"])),
        capture_sizes=sorted(draw(st.sets(st.integers(1, 16), min_size=1, max_size=4))),
        max_cached_graphs=draw(st.one_of(st.none(), st.integers(1, 3))),
        eviction=draw(st.sampled_from(["lru", "lfu"])),
        output_mode=draw(st.sampled_from(["copy", "view"])),
        capture_after=draw(st.integers(1, 2)),
        num_warmups=draw(st.integers(0, 1)),
        pad_value=0 if sums else draw(st.sampled_from([0, 2])),
    )
    calls = draw(st.lists(st.tuples(st.integers(0, 18), st.sampled_from(["float32", "float64", "int32"]),
                                    st.sampled_from([(), (7,), (3, 5)]), st.integers(0, 2**16)),
                          min_size=2, max_size=10))
    return names, sums, config, calls


_TOTAL = {"calls": 0, "examples": 0}


def test_random_gpu_pipelines_equal_eager(soak):
    @settings(max_examples=300 if soak else 30, deadline=None, derandomize=not soak,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=cases())
    def check(case):
        names, sums, config, calls = case
        fn = make(names, sums)
        f = cg.jit(fn, config=config)
        for n, (rows, dtype, trailing, seed) in enumerate(calls, 1):
            rng = np.random.default_rng(seed)
            shape = (rows, *trailing)
            host = rng.integers(-9, 10, size=shape) if dtype == "int32" else rng.standard_normal(shape)
            x = cupy.asarray(host.astype(dtype))
            got, want = cupy.asnumpy(f(x)), cupy.asnumpy(fn(x))
            assert got.shape == want.shape and got.dtype == want.dtype
            if sums and got.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            else:
                np.testing.assert_array_equal(got, want)
            check_stats(f, n)
        f.clear()
        _TOTAL["calls"] += len(calls)
        _TOTAL["examples"] += 1

    check()
    record("fuzz", "gpu pipelines x configs x call sequences", backend="cupy", cases=_TOTAL["calls"],
           examples=_TOTAL["examples"])
