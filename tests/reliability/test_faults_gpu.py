"""Capture faults on the GPU: each kind ends the capture cleanly and leaks nothing.

Kinds: a device-to-host read, a cuBLAS call, a cuRAND call, an exception raised by the user's
function mid-capture, out-of-memory during the capture and during the warm-up (the family's pool
with a hard limit), and a kernel launch error (a RawKernel launched with 2048 threads per block).

For each, repeated 20 times (100 with ``--soak``): the capture ends (the stream is not capturing
and runs a kernel), the family's pool holds nothing once the function holds no graph, CuPy's
default pool does not grow, and afterwards this function (fault switched off) and another one
capture and replay correctly. Ops CuPy refuses fall back with the reason (or raise CaptureError
naming the op under ``on_capture_error="raise"``); errors in the user's code propagate unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
cublas = pytest.importorskip("cupy.cublas", reason="needs CuPy's cupy.cublas")  # an unrouted level-1 BLAS call

from reliability_gpu import assert_same, drift, memory_figures, rand, stream_usable  # noqa: E402
from reliability_helpers import record  # noqa: E402

import cupygraph as cg  # noqa: E402

ROWS, WIDTH = 6, 256
POOL_LIMIT = 2 * 2**20  # fits the static buffers (8 x 256 float32), not the greedy temporaries

_SCALE = r'''
extern "C" __global__ void scale(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
'''


class Fault:
    """A pipeline whose fault is switched on with ``active``."""

    def __init__(self, kind: str):
        self.kind = kind
        self.active = True
        self.weight = cupy.asarray(np.random.default_rng(7).standard_normal((WIDTH, WIDTH)).astype(np.float32))
        self.kernel = cupy.RawKernel(_SCALE, "scale")

    def __call__(self, x):
        y = x * 2 + 1
        if self.active:
            kind = self.kind
            if kind == "d2h":
                y = y * float(y[0, 0])  # a host read of a device value
            elif kind == "cublas":
                y = y * cublas.nrm2(y.ravel())  # level-1 BLAS: not routed (y @ self.weight is, issue 29)
            elif kind == "curand":
                y = y + cupy.random.binomial(10, 0.5, size=y.shape).astype(y.dtype)  # never routed: refused
            elif kind == "user_exception":
                if cupy.cuda.get_current_stream().is_capturing():
                    raise ValueError("boom in user code, mid-capture")
            elif kind.startswith("oom"):
                tmp = cupy.empty((x.shape[0], 1 << 20), dtype=cupy.float32)  # 4 MiB a row
                tmp.fill(1.0)
                y = y + tmp[:, : y.shape[1]]
            elif kind.startswith("launch_error"):
                out = cupy.empty_like(y)
                self.kernel((1,), (2048,), (y, out, np.int64(y.size)))  # > 1024 threads a block
                y = out
        return y.sum(axis=1, keepdims=True) + y


# kind -> (what the failing call does, words in the reason or error, num_warmups)
KINDS = {
    "d2h": ("fallback", "device-to-host", 1),
    "cublas": ("fallback", "cuBLAS", 1),
    "curand": ("fallback", "cuRAND", 1),
    # An exception only the capture run raises: the key runs eagerly from then on (issue 19), with
    # the exception named in the reason; one that eager raises too would propagate.
    "user_exception": ("fallback", "boom in user code", 1),
    "oom_capture": ("fallback", "out of memory", 0),
    "oom_warmup": ("fallback", "out of memory", 1),
    "launch_error_capture": ("raises", "", 0),
    "launch_error_warmup": ("raises", "", 1),
}


def _fault_call(f: cg.GraphedFunction, fault: Fault, x, outcome: str, words: str) -> None:
    if outcome == "fallback":
        out = f(x)
        fault.active = True
        want = fault(x)
        if fault.kind == "curand":
            assert out.shape == want.shape
        else:
            assert_same(out, want)
        details = f.stats().last_detail_by_reason
        assert any(words in detail for detail in details.values()), details
        del out, want
    else:
        with pytest.raises(Exception) as info:
            f(x)
        assert not isinstance(info.value, (AssertionError, cg.CaptureError)), repr(info.value)
        assert words in str(info.value)
        if fault.kind.startswith("launch_error"):
            assert "CUDA" in type(info.value).__name__ or "CUDA" in str(info.value), repr(info.value)
        del info
    assert f.registry.num_graphs() == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_fault_ends_capture_leaks_nothing_and_engine_recovers(kind, soak):
    outcome, words, warmups = KINDS[kind]
    loops = 100 if soak else 20
    rng = np.random.default_rng(1)
    fault = Fault(kind)
    f = cg.jit(fault, config=dict(capture_sizes=[8], num_warmups=warmups))
    backend = f.registry.backend
    other_fn = lambda x: cupy.tanh(x) * 3
    other = cg.jit(other_fn, config=dict(capture_sizes=[8]))
    if kind.startswith("oom"):
        backend.pool.set_limit(size=POOL_LIMIT)
    x = rand(rng, ROWS, WIDTH)
    baseline = None
    try:
        for i in range(loops):
            f.clear()  # forget the failed key, so the capture is tried again
            fault.active = True
            _fault_call(f, fault, x, outcome, words)
            stream_usable()
            stream_usable(backend._capture_stream)
            f.clear()
            assert backend.pool_bytes() == 0, (i, backend.pool_bytes())
            assert backend.pool.used_bytes() == 0, (i, backend.pool.used_bytes())
            assert backend.pool.total_bytes() == 0, (i, backend.pool.total_bytes())
            # This function, fault off, and another function capture and replay correctly.
            fault.active = False
            for n in (ROWS, 3, ROWS):
                y = rand(rng, n, WIDTH)
                assert_same(f(y), fault(y))
                assert_same(other(y), other_fn(y))
            assert f.registry.num_graphs() == 1 and f.stats().hits >= 1
            del y
            cupy.cuda.Device().synchronize()
            figures = memory_figures()
            if baseline is None:
                baseline = figures
            assert figures["default_pool_used"] <= baseline["default_pool_used"], (i, figures, baseline)
    finally:
        backend.pool.set_limit(size=0)
    f.clear()
    after = memory_figures()
    growth = drift(baseline, after)
    record("faults", f"{kind} x {loops}", backend="cupy", cases=loops, drift=growth)
    assert growth["default_pool_used"] <= 0, growth


@pytest.mark.parametrize("kind", ["d2h", "cublas", "curand", "oom_capture", "oom_warmup"])
def test_fault_under_raise_names_the_op_and_leaves_the_stream_usable(kind):
    _outcome, words, warmups = KINDS[kind]
    fault = Fault(kind)
    f = cg.jit(fault, config=dict(capture_sizes=[8], num_warmups=warmups, on_capture_error="raise"))
    if kind.startswith("oom"):
        f.registry.backend.pool.set_limit(size=POOL_LIMIT)
    try:
        with pytest.raises(cg.CaptureError, match=words):
            f(rand(np.random.default_rng(2), ROWS, WIDTH))
    finally:
        f.registry.backend.pool.set_limit(size=0)
    stream_usable()
    assert f.registry.backend.pool_bytes() == 0 and f.stats().capture_failures == 1
    record("faults", f"{kind} under on_capture_error=raise", backend="cupy", cases=1)


def test_fault_while_other_graphs_of_the_family_are_held():
    """A failed capture next to held graphs: those keep replaying bit for bit, and repeated
    failures do not grow the family's pool."""
    rng = np.random.default_rng(3)
    fault = Fault("d2h")
    fault.active = False
    f = cg.jit(fault, config=dict(capture_sizes=[8, 16]))
    small = rand(rng, 5, WIDTH)
    assert_same(f(small), fault(small))  # the 8-row graph, captured without the fault and held
    backend = f.registry.backend
    sizes = []
    for _ in range(20):
        fault.active = True
        f.registry.forget_failures()  # retry the 16-row capture each time (it fails: a host read)
        big = rand(rng, 12, WIDTH)
        out = f(big)
        fault.active = True
        assert_same(out, fault(big))
        fault.active = False
        assert_same(f(small), fault(small))
        sizes.append(backend.pool_bytes())
        del out, big
    assert f.registry.num_graphs() == 1
    assert max(sizes[1:]) <= sizes[0], sizes  # the failed attempts reuse the same cached blocks
    record("faults", "d2h next to a held graph x 20", backend="cupy", cases=20,
           drift={"family_pool_bytes": sizes[-1] - sizes[0]})
