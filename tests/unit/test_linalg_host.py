"""cupygraph.matmul / cupygraph.linalg without a GPU (issue 13).

* The host backend runs NumPy with the contracts of the cuBLAS path: NumPy's matmul semantics,
  the same dtype and shape errors, gemm's alpha/beta/transposes, and products that a host capture
  accepts while it still refuses a raw ``@``.
* The layout choice that maps NumPy semantics onto cuBLAS's column-major GEMM is checked by
  running its calls on an emulated cuBLAS (NumPy over the very memory the call names), for C, F,
  transposed, sliced, broadcast and reversed operands.
* The binding's import and error paths, where CuPy or nvmath-python are missing.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import pytest
from extras import need
from replay_helpers import AsItIs, eager_at_padded_size, gemm_bound, run_threads
from repo_files import load_example

import cupygraph as cg
from cupygraph.errors import BackendUnavailableError
from cupygraph.linalg import _binding, _library
from cupygraph.linalg._shapes import SUPPORTED, matmul_shapes, resolve

DTYPES = [np.float16, np.float32, np.float64, np.complex64, np.complex128]


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def tolerance(dtype):
    return {"e": 2e-2, "f": 1e-4, "F": 1e-4}.get(np.dtype(dtype).char, 1e-10)


# -- the planner against an emulated cuBLAS ---------------------------------------------------------


def _colmajor(x, count, stride, rows, cols, ld, writeable=False):
    """The (count, rows, cols) column-major matrices cuBLAS would see at x's first element."""
    itemsize = x.itemsize
    return np.lib.stride_tricks.as_strided(
        x, shape=(count, rows, cols), strides=(stride * itemsize, itemsize, ld * itemsize), writeable=writeable)


def emulate_gemm(call, first, second, target):
    """cublasGemmStridedBatchedEx on NumPy memory: C = op(A) @ op(B), column-major."""
    am, ak = (call.k, call.m) if call.trans_a else (call.m, call.k)
    bk, bn = (call.n, call.k) if call.trans_b else (call.k, call.n)
    a = _colmajor(first, call.batch, call.stride_a, am, ak, call.lda)
    b = _colmajor(second, call.batch, call.stride_b, bk, bn, call.ldb)
    c = _colmajor(target, call.batch, call.stride_c, call.m, call.n, call.ldc, writeable=True)
    op_a = a.transpose(0, 2, 1) if call.trans_a else a
    op_b = b.transpose(0, 2, 1) if call.trans_b else b
    c[...] = op_a @ op_b


def matmul_through_call(a, b, out):
    batch, m, k, n = matmul_shapes(a.shape, b.shape, "test")
    copies = []

    def temporary():
        copies.append("c")
        return np.empty((*batch, m, n), dtype=out.dtype)

    call, pa, pb, target = resolve(a, b, out, batch, m, k, n, np, temporary)
    copies += [name for name, new, old in (("a", pa, a), ("b", pb, b)) if new is not old]
    first, second = (pa, pb) if call.first == "a" else (pb, pa)
    emulate_gemm(call, first, second, target)
    if target is not out:
        out[...] = target
    return copies


def _layout(rng, x, kind):
    """``x`` (values) laid out as ``kind``: a view with the same values."""
    if kind == "C":
        return np.ascontiguousarray(x)
    if kind == "F":
        return np.asfortranarray(x)
    if kind == "T":  # the transpose of a C array, transposed back: F-like matrices at C batch order
        return np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    if kind == "padded":  # a slice of a wider array: leading dimension larger than the extent
        wide = np.zeros((*x.shape[:-1], x.shape[-1] + 3), dtype=x.dtype)
        wide[..., : x.shape[-1]] = x
        return wide[..., : x.shape[-1]]
    if kind == "reversed":  # negative strides: cuBLAS cannot read it, a copy must be made
        flipped = np.ascontiguousarray(x[..., ::-1, :])
        return flipped[..., ::-1, :]
    if kind == "strided":  # every other column: no unit stride
        wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    raise ValueError(kind)


LAYOUTS = ["C", "F", "T", "padded", "reversed", "strided"]


def copy_expected(kind, rows, cols, own_batch, batch):
    """Whether cuBLAS cannot read an operand of this layout in place (so the call copies it)."""
    if own_batch != tuple(batch) and math.prod(own_batch) > 1:
        return None  # a partly broadcast batch may or may not flatten into one stride: not asserted
    if kind == "F" and math.prod(own_batch) > 1:
        return None  # NumPy's F order of a stack: no matrix has a unit stride (copied unless a vector)
    if kind == "reversed":
        return rows > 1
    if kind == "strided":
        return rows > 1 and cols > 1
    return False


@pytest.mark.parametrize("seed", range(6))
def test_chosen_cublas_calls_compute_numpy_matmul_for_every_layout(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        m, k, n = (int(v) for v in rng.integers(1, 7, size=3))
        batch_a = [(), (3,), (2, 3), (1, 3), (2, 1)][rng.integers(5)]
        batch_b = [(), (3,), (1,), (2, 3)][rng.integers(4)]
        try:
            batch = np.broadcast_shapes(batch_a, batch_b)
        except ValueError:
            continue
        dtype = DTYPES[rng.integers(len(DTYPES))]
        kinds = [LAYOUTS[rng.integers(len(LAYOUTS))] for _ in range(3)]
        a = _layout(rng, rand(rng, (*batch_a, m, k), dtype), kinds[0])
        b = _layout(rng, rand(rng, (*batch_b, k, n), dtype), kinds[1])
        out = _layout(rng, np.full((*batch, m, n), np.nan, dtype=dtype), kinds[2])
        copies = matmul_through_call(a, b, out)
        want = np.matmul(a.astype(np.complex128), b.astype(np.complex128))
        want = want if np.dtype(dtype).kind == "c" else want.real
        np.testing.assert_allclose(out, want.astype(dtype), rtol=tolerance(dtype), atol=tolerance(dtype),
                                   err_msg=f"{kinds} {dtype} a{a.shape} b{b.shape}")
        # Views cuBLAS can read are used in place; only the others are copied.
        for name, kind, rows, cols, own in (("a", kinds[0], m, k, batch_a), ("b", kinds[1], k, n, batch_b),
                                            ("c", kinds[2], m, n, batch)):
            expected = copy_expected(kind, rows, cols, own, batch)
            if expected is not None:
                assert (name in copies) == expected, (name, kind, (rows, cols), own, batch, copies)


def test_the_gemm_call_handles_vectors_and_unit_axes():
    rng = np.random.default_rng(7)
    for m, k, n in [(1, 1, 1), (1, 5, 1), (4, 1, 3), (1, 3, 6), (6, 3, 1)]:
        for kinds in [("C", "C", "C"), ("F", "T", "F"), ("padded", "F", "C")]:
            a = _layout(rng, rand(rng, (m, k), np.float64), kinds[0])
            b = _layout(rng, rand(rng, (k, n), np.float64), kinds[1])
            out = _layout(rng, np.full((m, n), np.nan), kinds[2])
            matmul_through_call(a, b, out)
            np.testing.assert_allclose(out, a @ b, rtol=1e-12)


# -- the host backend: NumPy with the contracts of the GPU path --------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_follows_numpy_semantics(dtype):
    rng = np.random.default_rng(1)
    shapes = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
              ((5, 2, 3), (1, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((0, 2, 3), (3, 4)), ((2, 0), (0, 3))]
    for sa, sb in shapes:
        a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
        got = cg.matmul(a, b)
        want = np.matmul(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tolerance(dtype), atol=tolerance(dtype))
        out = np.full(want.shape, np.nan, dtype=dtype)
        assert cg.matmul(a, b, out=out) is out
        np.testing.assert_allclose(out, want, rtol=tolerance(dtype), atol=tolerance(dtype))


def test_matmul_promotes_mixed_float_dtypes_as_numpy():
    rng = np.random.default_rng(2)
    a, b = rand(rng, (3, 4), np.float16), rand(rng, (4, 2), np.float32)
    assert cg.matmul(a, b).dtype == np.float32
    assert cg.matmul(a, rand(rng, (4, 2), np.complex64)).dtype == np.complex64


@pytest.mark.parametrize(("a", "b", "error", "words"), [
    (np.ones((2, 3), np.int32), np.ones((3, 2), np.float32), TypeError, ["'a'", "int32", "astype"]),
    (np.ones((2, 3)), np.ones((3, 2), bool), TypeError, ["'b'", "bool"]),
    (np.ones((2, 3)), np.ones((4, 2)), ValueError, ["(2, 3)", "(4, 2)", "3", "4"]),
    (np.ones((2, 2, 3)), np.ones((3, 3, 2)), ValueError, ["batch axes", "(2,)", "(3,)"]),
    (np.ones(()), np.ones((3,)), ValueError, ["'a'", "0-d"]),
])
def test_matmul_errors_name_the_argument(a, b, error, words):
    with pytest.raises(error) as info:
        cg.matmul(a, b)
    for word in words:
        assert word in str(info.value)


def test_matmul_out_must_match_the_result():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(ValueError, match=r"out is float32\[2, 4\] but the result is float64\[2, 4\]"):
        cg.matmul(a, b, out=np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"out is float64\[4, 2\]"):
        cg.matmul(a, b, out=np.empty((4, 2)))
    with pytest.raises(TypeError, match="'out' must be a NumPy array"):
        cg.matmul(a, b, out=[[0.0] * 4] * 2)


def test_gemm_alpha_beta_transposes_and_broadcast_c():
    rng = np.random.default_rng(3)
    for dtype in DTYPES:
        a, b = rand(rng, (4, 3, 5), dtype), rand(rng, (4, 2, 3), dtype)
        c = rand(rng, (2,), dtype)  # a bias row, broadcast over the batch and the rows
        got = cg.linalg.gemm(a, b, c, alpha=0.5, beta=2.0, trans_a=True, trans_b=True)
        want = 0.5 * (np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2)) + 2.0 * c
        assert got.shape == (4, 5, 2) and got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tolerance(dtype), atol=5 * tolerance(dtype))


def test_gemm_updates_c_in_place_and_ignores_c_when_beta_is_zero():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (3, 4), np.float64), rand(rng, (4, 2), np.float64)
    c = rand(rng, (3, 2), np.float64)
    before = c.copy()
    assert cg.linalg.gemm(a, b, c, beta=1.0, out=c) is c
    np.testing.assert_allclose(c, a @ b + before, rtol=1e-12)
    poisoned = np.full((3, 2), np.nan)
    np.testing.assert_allclose(cg.linalg.gemm(a, b, poisoned, alpha=3.0, beta=0.0), 3.0 * (a @ b), rtol=1e-12)


def test_gemm_scale_arrays_are_read_at_every_call_and_checked():
    a, b = np.eye(2, dtype=np.float16), np.full((2, 2), 2.0, np.float16)
    alpha = cg.linalg.scalar(1.5, like=a)
    assert alpha.dtype == np.float32 and alpha.shape == ()  # float16 GEMMs scale in float32
    np.testing.assert_array_equal(cg.linalg.gemm(a, b, alpha=alpha), np.full((2, 2), 3.0, np.float16))
    alpha[...] = -1.0
    np.testing.assert_array_equal(cg.linalg.gemm(a, b, alpha=alpha), np.full((2, 2), -2.0, np.float16))
    with pytest.raises(TypeError, match=r"alpha given as an array must hold one float32 value .* float16"):
        cg.linalg.gemm(a, b, alpha=np.ones((), np.float16))
    with pytest.raises(TypeError, match=r"beta = .*complex but the operands are float16"):
        cg.linalg.gemm(a, b, beta=1j)
    with pytest.raises(TypeError, match="alpha must be a number"):
        cg.linalg.gemm(a, b, alpha="2")


def test_gemm_needs_matrices_and_strided_batched_needs_3d():
    with pytest.raises(ValueError, match="'a' must be at least 2-D"):
        cg.linalg.gemm(np.ones(3), np.ones((3, 2)))
    with pytest.raises(ValueError, match="'b' must be 3-D"):
        cg.linalg.gemm_strided_batched(np.ones((2, 3, 3)), np.ones((3, 3)))
    rng = np.random.default_rng(5)
    a, b = rand(rng, (5, 2, 3), np.float32), rand(rng, (1, 3, 4), np.float32)
    np.testing.assert_allclose(cg.linalg.gemm_strided_batched(a, b, alpha=2.0), 2 * (a @ b), rtol=1e-5)


def test_gemm_batched_over_lists():
    rng = np.random.default_rng(6)
    a = [rand(rng, (3, 4), np.complex64) for _ in range(5)]
    b = [rand(rng, (2, 3), np.complex64) for _ in range(5)]
    c = [rand(rng, (4, 2), np.complex64) for _ in range(5)]
    got = cg.linalg.gemm_batched(a, b, c, alpha=2.0, beta=-1.0, trans_a=True, trans_b=True)
    want = np.stack([2.0 * (x.T @ y.T) - z for x, y, z in zip(a, b, c)])
    assert got.shape == (5, 4, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    out = [np.empty((4, 2), np.complex64) for _ in range(5)]
    assert cg.linalg.gemm_batched(a, b, trans_a=True, trans_b=True, out=out) is out
    np.testing.assert_allclose(np.stack(out), np.stack([x.T @ y.T for x, y in zip(a, b)]), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"a\[1\] is float64\[2, 2\] but a\[0\] is float64\[3, 3\]"):
        cg.linalg.gemm_batched([np.ones((3, 3)), np.ones((2, 2))], [np.ones((3, 3))] * 2)
    with pytest.raises(TypeError, match="non-empty list"):
        cg.linalg.gemm_batched([], [])


# -- inside jit on the host backend ------------------------------------------------------------------


def test_matmul_runs_in_a_full_host_graph_where_raw_matmul_is_refused_with_routing_off():
    rng = np.random.default_rng(8)
    w = rand(rng, (16, 8), np.float32)
    bias = rand(rng, (8,), np.float32)

    def layer(x, w, bias):
        y = cg.matmul(x, w)
        return y, np.tanh(y + bias)

    graphed = cg.jit(layer, constant_argnums=(1, 2), config={"backend": "host", "mode": "FULL", "max_capture_size": 32})
    as_it_is = AsItIs(graphed)
    for n in (3, 17, 32, 5, 17):
        x = rand(rng, (n, 16), np.float32)
        plain = as_it_is(x, w, bias)
        got = graphed(x, w, bias)
        # The promise for products (RELIABILITY.md, 1): bit for bit the eager call at the padded size (a replay)
        # or at n rows (the call that captures its key runs as it is); against the call at n rows, within the
        # GEMM rounding bound (BLAS picks kernels by row count and threads).
        for g, want in zip(got, layer(x, w, bias) if plain else eager_at_padded_size(graphed, x, w, bias)):
            np.testing.assert_array_equal(g, want)
        assert (np.abs(got[0].astype(np.float64) - layer(x, w, bias)[0]) <= gemm_bound(x, w)).all()
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.captures >= 1 and stats.hits >= 1

    # Unchanged `x @ w` is routed (issue 29); with routing off it is refused as the GPU refuses cuBLAS.
    raw = cg.jit(lambda x, w, bias: np.tanh(x @ w + bias), constant_argnums=(1, 2),
                 config={"backend": "host", "mode": "FULL", "route_library_calls": False})
    raw(rand(rng, (4, 16), np.float32), w, bias)
    detail = raw.stats().detail("library_call")
    assert raw.stats().fallbacks == 1 and "cupygraph.matmul" in detail, detail


def test_matmul_results_stay_guarded_in_a_host_capture():
    w = np.eye(4, dtype=np.float32)

    def reads_back(x, w):
        y = cg.matmul(x, w)
        return x * float(y.sum())  # a device-to-host read on the GPU: refused there, so here

    graphed = cg.jit(reads_back, constant_argnums=1, config={"backend": "host", "mode": "FULL"})
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(graphed(x, w), reads_back(x, w))
    assert graphed.stats().fallbacks == 1 and "float() of an array" in graphed.stats().detail("device_to_host_read")


def test_gemm_scalar_changes_between_host_replays():
    a = np.eye(3, dtype=np.float64)
    alpha = cg.linalg.scalar(2.0, like=a)

    graphed = cg.jit(lambda x, a, alpha: cg.linalg.gemm(x, a, alpha=alpha), constant_argnums=(1, 2),
                     config={"backend": "host", "mode": "FULL"})
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(graphed(x, a, alpha), 2.0 * x)
    alpha[...] = -3.0  # in place: the same array, read again by the replay
    np.testing.assert_array_equal(graphed(x, a, alpha), -3.0 * x)
    assert graphed.stats().hits >= 1 and graphed.stats().fallbacks == 0


# -- the binding's import and error paths ----------------------------------------------------------


def test_library_path_is_found_in_a_memory_map():
    maps = "\n".join([
        "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libcublasLt.so.13.1.0",
        "7f20-7f30 r-xp 00000000 08:01 2 /opt/venv/nvidia/cu13/lib/libcublas.so.13",
        "7f40-7f50 rw-p 00000000 00:00 0 [heap]",
    ])
    assert _library.library_in_maps(maps) == "/opt/venv/nvidia/cu13/lib/libcublas.so.13"
    assert _library.library_in_maps(maps, "libcublasLt.so") == "/usr/lib/libcublasLt.so.13.1.0"
    assert _library.library_in_maps("7f40-7f50 rw-p 0 00:00 0 [heap]") is None


def test_binding_names_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="unknown cuBLAS binding 'mkl'; valid: auto, nvmath, ctypes"):
        _binding.load_binding("mkl")
    monkeypatch.setenv(_library.ENV, "Ctypes ")
    assert _library.requested_binding() == "ctypes"
    monkeypatch.setenv(_library.ENV, "cublaslt")
    with pytest.raises(ValueError, match="CUPYGRAPH_CUBLAS_BINDING='cublaslt' is not a cuBLAS binding"):
        _library.requested_binding()


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except Exception:
        return False
    return True


def test_nvmath_binding_says_what_to_install_when_missing():
    if _importable("nvmath.bindings.cublas"):
        pytest.skip("nvmath-python is installed here: its missing-package path cannot be shown")
    with pytest.raises(BackendUnavailableError, match="pip install nvmath-python"):
        _binding.load_binding("nvmath")


def test_ctypes_binding_says_it_needs_cupy_when_missing():
    if _importable("cupy_backends.cuda.libs.cublas"):
        pytest.skip("CuPy's cuBLAS module is importable here: its missing path cannot be shown")
    with pytest.raises(BackendUnavailableError, match="needs CuPy's libcublas"):
        _binding.load_binding("ctypes")
    with pytest.raises(BackendUnavailableError):
        _binding.load_binding("auto")


def test_import_cupygraph_loads_no_binding_and_reports_no_resources():
    # In a fresh interpreter: in this one, tests that ran before may have loaded them.
    import subprocess

    probe = ("import sys, cupygraph as cg; "
             "loaded = [m for m in ('nvmath', 'nvmath.bindings.cublas', 'nvmath.bindings.cublasLt', "
             "'cupygraph.linalg._cublas_handles', 'cupygraph.linalg._lt_binding') "
             "if m in sys.modules]; print(loaded, cg.linalg.resources(), cg.linalg.gemm_plans())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] {'handles': 0, 'lt_handles': 0, 'workspaces': 0, 'workspace_bytes': 0} []", out


def test_the_supported_dtypes_are_the_cublas_gemm_types():
    assert [t.char for t in SUPPORTED] == list(_binding.DATA_TYPE) == list(_binding.COMPUTE_TYPE)
    assert [t.name for t in SUPPORTED] == [np.dtype(t).name for t in DTYPES]


def test_pointer_table_kernel_compiles_for_sm90():
    nvrtc = need("cuda.bindings.nvrtc", "cuda", what="the pointer-table kernel's compile check")
    from cupygraph.linalg._pointer_table import POINTER_TABLE_SOURCE

    source = POINTER_TABLE_SOURCE.encode()
    err, prog = nvrtc.nvrtcCreateProgram(source, b"pointer_table.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    (err,) = nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=sm_90"])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, "the pointer-table kernel does not compile"
    nvrtc.nvrtcDestroyProgram(prog)


def test_mlp_example_runs_on_the_host_backend():

    module = load_example("mlp_full")
    result = module.main(["--calls", "12", "--max-batch", "32", "--backend", "host"])
    assert result["fallbacks"] == 0 and result["graphs"] >= 1
    assert result["worst"] == 0.0  # the eager call on the padded batch, bit for bit
    # At the real rows only the GEMMs' rounding differs: 8 layers of 256-term float32 sums stay far below
    # 1e-3 on O(1) activations, while a wrong or stale row would be off by O(1).
    assert 0.0 <= result["worst_unpadded"] < 1e-3


def test_the_retire_queue_counts_handles_per_library():
    from cupygraph.linalg import _retire

    before = {lib: _retire.pending(lib) for lib in ("cublas", "cusolver")}
    total = _retire.pending()
    _retire.retire(lambda: None, 0, "cublas")
    _retire.retire(lambda: None, 0, "cusolver")
    try:
        assert _retire.pending("cublas") == before["cublas"] + 1
        assert _retire.pending("cusolver") == before["cusolver"] + 1
        assert _retire.pending() == total + 2
    finally:
        del _retire._retired[-2:]  # (destroying needs CuPy; leave the queue as it was)


def test_threads_sharing_a_stream_each_get_their_own_cublas_workspace(monkeypatch):
    """Threads' GEMMs on one stream (the null stream) must not share a workspace: a GEMM is several
    kernels (split-K partial sums, then a reduction), and two threads' launches interleave on the stream,
    so a shared workspace hands one thread's reduction the other's partial sums (an H200 showed it).
    A thread calling again keeps its own; an ended thread's is let go when the next one is made."""
    import time

    from cupygraph.linalg import _cublas_handles as handles

    made = []

    class SlowWorkspace:  # a slow allocation widens the window a lookup race would need
        def __init__(self, device_id, stream, nbytes):
            time.sleep(0.02)
            self._stream = stream
            made.append(self)

        def serves(self, stream):
            return True

    stream = type("Stream", (), {"ptr": 0})()
    monkeypatch.setattr(handles, "Workspace", SlowWorkspace)
    monkeypatch.setattr(handles, "workspace_bytes", lambda device_id: 1 << 20)
    monkeypatch.setattr(handles, "stream_is_capturing", lambda s: False)
    monkeypatch.setattr(handles, "_live", type(handles._live)())
    monkeypatch.setattr(handles, "_eager", {})
    got: dict[int, list] = {}
    all_made = threading.Barrier(4)  # no thread ends before every thread has made its own

    def two_lookups(t):
        got[t] = [handles.workspace_for(0, stream), handles.workspace_for(0, stream)]
        all_made.wait(timeout=30)

    errors = run_threads(two_lookups, 4)
    assert not errors, errors
    assert len(made) == 4 and len({id(first) for first, _ in got.values()}) == 4
    assert all(first is again for first, again in got.values())  # a thread keeps its own
    assert len(handles._eager) == 4  # (kept while their threads lived)
    mine = handles.workspace_for(0, stream)  # the ended threads' are let go as this one is made
    assert list(handles._eager.values()) == [mine] and len(made) == 5
