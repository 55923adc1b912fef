"""The fused GEMMs (``linalg.linear``, ``gemm(bias=, activation=)``; issue 31) without a GPU.

* The host backend: argument checks and their errors, results against a direct NumPy formula, and
  ``jit`` flows (a replay is the padded eager call bit for bit).
* The cuBLASLt route's planning and calls, run on an emulated cuBLASLt (``FakeLt``: NumPy over the
  very host memory each call names, column-major as cuBLASLt reads it, with its epilogues): the
  feature-major layout puts the bias on the result's columns for one row and many, transposed,
  strided, sliced, batched and broadcast operands; one heuristic query per key; nothing made while
  capturing; keys without an algorithm run unfused.
* The ctypes binding: its signature table against cublasLt.h's prototypes, and the same products
  through it (ctypes callbacks standing in for libcublasLt).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from lt_emulator import FakeLt, c_library, lt_product, reference
from replay_helpers import AsItIs, eager_at_padded_size, gemm_bound

import cupygraph as cg
from cupygraph.errors import CaptureError
from cupygraph.linalg import _lt_binding, _lt_plans
from cupygraph.linalg._shapes import GemmCall

FLOATS = [np.float32, np.float64, np.float16]
ACTIVATIONS = [None, "relu", "gelu"]
TOL = {"e": 2e-2, "f": 2e-5, "d": 1e-12}


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    """Each test sees its own process-wide algorithm choices (and leaves the real ones as they were)."""
    monkeypatch.setattr(_lt_plans, "_choices", {})


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def close(got, want, dtype):
    tol = TOL[np.dtype(dtype).char]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


# -- the host backend ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_on_the_host_is_the_formula(dtype, activation):
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, (7, 12), dtype), rand(rng, (12, 5), dtype), rand(rng, (5,), dtype)
    wide = (x.astype(np.float64) @ w.astype(np.float64)) + b.astype(np.float64)
    if activation == "relu":
        want = np.maximum(wide, 0)
    elif activation == "gelu":
        want = 0.5 * wide * (1 + np.tanh(np.sqrt(2 / np.pi) * (wide + 0.044715 * wide**3)))
    else:
        want = wide
    got = cg.linalg.linear(x, w, b, activation=activation)
    assert got.dtype == dtype and got.shape == (7, 5)
    close(got, want, dtype)
    no_bias = cg.linalg.linear(x, w, activation=activation)
    close(no_bias, reference(x, w, None, activation), dtype)


def test_gemm_epilogue_on_the_host_covers_alpha_beta_c_transposes_and_batches():
    rng = np.random.default_rng(2)
    a, b = rand(rng, (3, 6, 4), np.float64), rand(rng, (4, 5), np.float64)
    c, bias = rand(rng, (6, 5), np.float64), rand(rng, (5,), np.float64)
    # b stored transposed (5, 4) and passed with trans_b; c broadcasts over the batch
    got = cg.linalg.gemm(a, b.T.copy(), c, alpha=0.5, beta=2.0, trans_b=True, bias=bias, activation="ReLU ")
    want = np.maximum(0.5 * (a @ b) + 2.0 * c + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    out = np.empty((3, 6, 5))
    assert cg.linalg.gemm(a, b, bias=bias, out=out) is out
    np.testing.assert_allclose(out, a @ b + bias, rtol=1e-12)


def test_linear_takes_leading_axes_and_vectors():
    rng = np.random.default_rng(3)
    w, b = rand(rng, (6, 4), np.float32), rand(rng, (4,), np.float32)
    x3 = rand(rng, (2, 3, 6), np.float32)
    got = cg.linalg.linear(x3, w, b, activation="gelu")
    assert got.shape == (2, 3, 4)
    close(got, reference(x3.reshape(6, 6), w, b, "gelu").reshape(2, 3, 4), np.float32)
    out = np.empty((2, 3, 4), np.float32)
    assert cg.linalg.linear(x3, w, b, out=out) is out
    close(out, reference(x3.reshape(6, 6), w, b, None).reshape(2, 3, 4), np.float32)
    v = rand(rng, (6,), np.float32)
    assert cg.linalg.linear(v, w, b).shape == (4,)
    close(cg.linalg.linear(v, w, b), reference(v[None], w, b, None)[0], np.float32)
    # A PyTorch-style (out, in) weight passes as its transpose, a view
    close(cg.linalg.linear(x3[0], w.T.copy().T, b), reference(x3[0], w, b, None), np.float32)


def test_linear_and_gemm_choose_their_backend_in_one_place(monkeypatch):
    from cupygraph.linalg import _gemm_backend

    asked = []
    on_gpu = _gemm_backend.on_gpu
    monkeypatch.setattr(_gemm_backend, "on_gpu", lambda *arrays: asked.append(arrays) or on_gpu(*arrays))
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, (2, 3, 6), np.float32), rand(rng, (6, 4), np.float32), rand(rng, (4,), np.float32)
    cg.linalg.linear(x, w, b, activation="relu")
    cg.linalg.gemm(x[0], w, bias=b)
    assert [len(arrays) for arrays in asked] == [4, 4] and asked[0][1] is w and asked[1][1] is w
    with pytest.raises(ValueError, match=r"cupygraph\.linalg\.linear: bias"):  # the caller's name, from either backend
        cg.linalg.linear(x, w, np.ones(5, np.float32))


def test_relu_keeps_a_nan_as_cublaslts_epilogue_does():
    x = np.array([[np.nan, 1.0], [2.0, -3.0]], np.float32)
    got = cg.linalg.linear(x, np.eye(2, dtype=np.float32), np.zeros(2, np.float32), activation="relu")
    np.testing.assert_array_equal(got, [[np.nan, np.nan], [2.0, 0.0]])  # (the NaN row's products are NaN)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda x, w, b: cg.linalg.linear(x, w, b, activation="tanh"), ValueError,
     "activation='tanh' is not an activation; valid: None, 'relu', 'gelu'"),
    (lambda x, w, b: cg.linalg.linear(x, w, b, activation=1), ValueError, "activation=1 is not an activation"),
    (lambda x, w, b: cg.linalg.linear(x, w, b[:3]), ValueError, r"bias has shape \(3,\) but the result has 4 columns"),
    (lambda x, w, b: cg.linalg.linear(x, w, b[None]), ValueError, r"shape \(1, 4\).*shape \(4,\)"),
    (lambda x, w, b: cg.linalg.linear(x, w, b.astype(np.float64)), TypeError,
     r"bias is float64 but the product is float32; cast it with bias.astype\('float32'\)"),
    (lambda x, w, b: cg.linalg.linear(x, w, list(b)), TypeError, "argument 'bias' must be a NumPy array"),
    (lambda x, w, b: cg.linalg.linear(x.astype(np.complex64), w.astype(np.complex64)), TypeError, None),
    (lambda x, w, b: cg.linalg.linear(x.astype(np.complex64), w.astype(np.complex64), activation="relu"), TypeError,
     "a bias or activation needs a float16, float32, float64 product, but the operands make complex64"),
    (lambda x, w, b: cg.linalg.linear(x, w[:5], b), ValueError,
     r"x has 6 features .* but weight has 5 rows; weight is \(in_features, out_features\)"),
    (lambda x, w, b: cg.linalg.linear(x, w[None], b), ValueError, r"weight must be 2-D .* got shape \(1, 6, 4\)"),
    (lambda x, w, b: cg.linalg.linear(x[0, 0], w, b), ValueError, "x must be at least 1-D"),
    (lambda x, w, b: cg.linalg.linear([[1.0]], w, b), TypeError, "argument 'x' must be an array, got list"),
    (lambda x, w, b: cg.linalg.linear(x[None], w, b, out=np.empty((1, 3, 5), np.float32)), ValueError,
     r"out has shape \(1, 3, 5\) but the result is \(1, 3, 4\)"),
    (lambda x, w, b: cg.linalg.linear(x[None], w, b, out=np.empty((1, 4, 3), np.float32).swapaxes(1, 2)),
     ValueError, "out must be C-contiguous where x is not 2-D"),
    (lambda x, w, b: cg.linalg.gemm(x, w, bias=b, activation="swish"), ValueError,
     "cupygraph.linalg.gemm: activation='swish'"),
])
def test_bad_epilogue_arguments_are_named(call, error, words):
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, (3, 6), np.float32), rand(rng, (6, 4), np.float32), rand(rng, (4,), np.float32)
    if words is None:  # complex without an epilogue: a plain product, refused only with one
        assert call(x, w, b).dtype == np.complex64
        return
    with pytest.raises(error, match=words):
        call(x, w, b)


def test_linear_layers_run_as_full_host_graphs_equal_to_the_padded_eager_call():
    rng = np.random.default_rng(5)
    w1, b1 = rand(rng, (16, 32), np.float32), rand(rng, (32,), np.float32)
    w2, b2 = rand(rng, (32, 8), np.float32), rand(rng, (8,), np.float32)

    def mlp(x, w1, b1, w2, b2):
        return cg.linalg.linear(cg.linalg.linear(x, w1, b1, activation="relu"), w2, b2, activation="gelu")

    graphed = cg.jit(mlp, constant_argnums=(1, 2, 3, 4), config={"backend": "host", "mode": "FULL",
                                                                 "max_capture_size": 64})
    as_it_is = AsItIs(graphed)
    for n in (1, 16, 64, 3, 16, 1, 40, 3):
        x = rand(rng, (n, 16), np.float32)
        plain = as_it_is(x, w1, b1, w2, b2)
        got = graphed(x, w1, b1, w2, b2)
        want = mlp(x, w1, b1, w2, b2) if plain else eager_at_padded_size(graphed, x, w1, b1, w2, b2)
        np.testing.assert_array_equal(got, want)
        close(got, reference(reference(x, w1, b1, "relu"), w2, b2, "gelu"), np.float32)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits >= 3


def test_a_padded_fused_layer_is_within_the_gemm_bound_of_the_unpadded_one():
    rng = np.random.default_rng(6)
    w, b = rand(rng, (48, 24), np.float32), rand(rng, (24,), np.float32)
    graphed = cg.jit(lambda x, w, b: cg.linalg.linear(x, w, b), constant_argnums=(1, 2),
                     config={"backend": "host", "mode": "FULL", "capture_sizes": [4, 8, 16, 32]})
    for n in (3, 13, 29, 13):
        x = rand(rng, (n, 48), np.float32)
        difference = np.abs(graphed(x, w, b).astype(np.float64) - cg.linalg.linear(x, w, b))
        assert (difference <= gemm_bound(x, w) + np.finfo(np.float32).eps * np.abs(b)).all()


# -- the cuBLASLt route on an emulated cuBLASLt ----------------------------------------------------


def _layout(x, kind):
    if kind == "F":
        return np.asfortranarray(x)
    if kind == "padded":
        wide = np.zeros((*x.shape[:-1], x.shape[-1] + 3), x.dtype)
        wide[..., : x.shape[-1]] = x
        return wide[..., : x.shape[-1]]
    if kind == "T":
        return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    return np.ascontiguousarray(x)


@pytest.mark.parametrize("rows", [1, 16, 64, 256])
@pytest.mark.parametrize("dtype", FLOATS)
def test_fused_products_on_emulated_cublaslt_equal_the_host_reference(rows, dtype):
    """Every layout the route accepts, through the planning code and the emulated library: one row
    (a GEMV-like shape), skinny, square and batched."""
    rng = np.random.default_rng(rows)
    fake = FakeLt()
    plans = _lt_plans.PlanCache(fake)
    handle = fake.create()
    for case in range(12):
        k, n = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        if case == 0:
            k = n = 32  # square
        activation = ACTIVATIONS[case % 3]
        bias = rand(rng, (n,), dtype) if case % 4 != 3 else None
        x = _layout(rand(rng, (rows, k), dtype), ["C", "F", "padded", "T"][case % 4])
        w = _layout(rand(rng, (k, n), dtype), ["C", "F", "padded", "T"][(case // 4) % 4])
        out = np.full((rows, n), np.nan, dtype) if case % 5 else np.full((n, rows), np.nan, dtype).T
        fused, _ = lt_product(fake, plans, handle, x, w, out, bias, activation)
        assert fused
        close(out, reference(x, w, bias, activation), dtype)
    # batched: a broadcast weight, and two batches of matrices with alpha, beta and c
    a, w = rand(rng, (3, rows, 8), dtype), rand(rng, (8, 5), dtype)
    bias = rand(rng, (5,), dtype)
    out = np.full((3, rows, 5), np.nan, dtype)
    assert lt_product(fake, plans, handle, a, w, out, bias, "relu")[0]
    close(out, reference(a, w, bias, "relu"), dtype)
    b3, c = rand(rng, (3, 8, 5), dtype), rand(rng, (3, rows, 5), dtype)
    out = c.copy()
    assert lt_product(fake, plans, handle, a, b3, out, bias, "gelu", alpha=0.5, beta=-1.5)[0]
    close(out, reference(a, b3, bias, "gelu", alpha=0.5, beta=-1.5, c=c), dtype)
    assert fake.matmuls == 14


def test_the_bias_lands_on_the_result_columns_for_one_row_and_many():
    fake = FakeLt()
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    bias = np.arange(1, 7, dtype=np.float32)
    for rows in (1, 5):
        x, w = np.zeros((rows, 3), np.float32), np.ones((3, 6), np.float32)
        out = np.full((rows, 6), np.nan, np.float32)
        lt_product(fake, plans, handle, x, w, out, bias, None)
        np.testing.assert_array_equal(out, np.broadcast_to(bias, (rows, 6)))
        _, call = lt_product(fake, plans, handle, x, w, out, -bias, "relu")
        np.testing.assert_array_equal(out, np.zeros((rows, 6)))
        assert (call.first, call.m, call.n) == ("b", 6, rows)  # cuBLAS's rows are the output features


def test_the_heuristic_is_asked_once_per_key_and_shared_by_threads_plans():
    fake = FakeLt()
    handle = fake.create()
    first, second = _lt_plans.PlanCache(fake), _lt_plans.PlanCache(fake)
    rng = np.random.default_rng(7)
    x, w, b = rand(rng, (16, 8), np.float32), rand(rng, (8, 4), np.float32), rand(rng, (4,), np.float32)
    out = np.empty((16, 4), np.float32)
    for _ in range(3):
        lt_product(fake, first, handle, x, w, out, b, "relu")
    assert fake.heuristic_calls == 1 and len(first) == 1 and fake.matmuls == 3
    lt_product(fake, second, handle, x, w, out, b, "relu")  # another thread: its own descriptors, the same kernel
    assert fake.heuristic_calls == 1 and len(second) == 1
    assert len({m["algo"] for m in fake.calls}) == 1
    lt_product(fake, first, handle, x, w, out, b, "gelu")  # another epilogue: another key
    lt_product(fake, first, handle, x[:8], w, out[:8], b, "relu")  # another row count
    assert fake.heuristic_calls == 3
    plans = cg.linalg.gemm_plans()
    assert sorted((p["m"], p["n"], p["epilogue"], p["fused"]) for p in plans) == [
        (4, 8, "bias+relu", True), (4, 16, "bias+gelu", True), (4, 16, "bias+relu", True)]


def test_an_unaligned_address_is_another_key_whose_algorithm_fits_it():
    fake = FakeLt()
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    rng = np.random.default_rng(8)
    base = rand(rng, (17, 5), np.float32)
    w, b = rand(rng, (5, 3), np.float32), rand(rng, (3,), np.float32)
    out = np.empty((16, 3), np.float32)
    lt_product(fake, plans, handle, base[:16], w, out, b, None)
    lt_product(fake, plans, handle, base[1:], w, out, b, None)  # 20 bytes further: 4-byte aligned
    assert fake.heuristic_calls == 2
    alignments = [key.alignments[1] for key in _lt_plans._choices]
    assert min(alignments) == 4  # the FakeLt checks every call's addresses against its algorithm's
    close(out, reference(base[1:], w, b, None), np.float32)


def test_nothing_is_planned_while_capturing():
    fake = FakeLt()
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    out = np.empty((4, 2), np.float32)
    made = len(fake.objects)
    with pytest.raises(CaptureError, match=r"no cuBLASLt plan for a 2x4x3 float32 GEMM .* run the function once"):
        lt_product(fake, plans, handle, x, w, out, None, "relu", capturing=True)
    assert len(fake.objects) == made and fake.heuristic_calls == 0
    lt_product(fake, plans, handle, x, w, out, None, "relu")  # eagerly first (jit's warm-up) ...
    lt_product(fake, plans, handle, x, w, out, None, "relu", capturing=True)  # ... then the capture finds it
    assert fake.heuristic_calls == 1 and fake.matmuls == 2


def test_a_key_without_an_algorithm_runs_unfused_and_says_why(caplog):
    fake = FakeLt(unsupported={_lt_binding.EPILOGUE_GELU_BIAS})
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b = np.ones((2, 3)), np.ones((3, 2)), np.zeros(2)
    out = np.empty((2, 2))
    fused, _ = lt_product(fake, plans, handle, x, w, out, b, "gelu")
    assert not fused and fake.matmuls == 0
    again, _ = lt_product(fake, plans, handle, x, w, out, b, "gelu")
    assert not again and fake.heuristic_calls == 1
    [plan] = cg.linalg.gemm_plans()
    assert plan["fused"] is False and plan["reason"] == "cuBLASLt's heuristic proposed no algorithm"
    assert plan["epilogue"] == "bias+gelu" and plan["dtype"] == "float64"


@pytest.mark.parametrize(("status", "fused_reason"), [(15, "CUBLAS_STATUS_NOT_SUPPORTED"), (7, "INVALID_VALUE")])
def test_heuristic_refusals_run_unfused_and_other_errors_raise(status, fused_reason):
    fake = FakeLt(heuristic_status=status)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    out = np.empty((2, 2), np.float32)
    fused, _ = lt_product(fake, plans, handle, np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), out, None,
                          "relu")
    assert not fused and fused_reason in cg.linalg.gemm_plans()[0]["reason"]
    broken = FakeLt(heuristic_status=13)
    with pytest.raises(cg.linalg.CublasError, match="EXECUTION_FAILED"):
        lt_product(broken, _lt_plans.PlanCache(broken), broken.create(), np.ones((2, 4), np.float32),
                   np.ones((4, 2), np.float32), out, None, "relu")
    assert [kind for kind in (o["kind"] for o in broken.objects.values()) if kind != "handle"] == []


def test_plans_beyond_the_limit_and_closed_plans_destroy_their_descriptors(monkeypatch):
    monkeypatch.setattr(_lt_plans, "MAX_PLANS", 2)
    fake = FakeLt()
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    w = np.ones((3, 2), np.float32)
    for rows in (1, 2, 3):
        lt_product(fake, plans, handle, np.ones((rows, 3), np.float32), w, np.empty((rows, 2), np.float32), None, None)
    assert len(plans) == 2
    assert sum(o["kind"] == "desc" for o in fake.objects.values()) == 2  # the first key's were destroyed
    plans.close()
    assert [o["kind"] for o in fake.objects.values()] == ["handle"]


# -- the ctypes binding ------------------------------------------------------------------------------

# cublasLt.h's prototypes, as nvmath-python's generated cycublasLt.pxd declares them (return type, parameters).
HEADER = {
    "cublasLtCreate": ("cublasStatus_t", ["cublasLtHandle_t*"]),
    "cublasLtDestroy": ("cublasStatus_t", ["cublasLtHandle_t"]),
    "cublasLtGetVersion": ("size_t", []),
    "cublasLtMatmulDescCreate": ("cublasStatus_t", ["cublasLtMatmulDesc_t*", "cublasComputeType_t", "cudaDataType_t"]),
    "cublasLtMatmulDescDestroy": ("cublasStatus_t", ["cublasLtMatmulDesc_t"]),
    "cublasLtMatmulDescSetAttribute": ("cublasStatus_t", ["cublasLtMatmulDesc_t", "cublasLtMatmulDescAttributes_t",
                                                          "const void*", "size_t"]),
    "cublasLtMatrixLayoutCreate": ("cublasStatus_t", ["cublasLtMatrixLayout_t*", "cudaDataType", "uint64_t",
                                                      "uint64_t", "int64_t"]),
    "cublasLtMatrixLayoutDestroy": ("cublasStatus_t", ["cublasLtMatrixLayout_t"]),
    "cublasLtMatrixLayoutSetAttribute": ("cublasStatus_t", ["cublasLtMatrixLayout_t", "cublasLtMatrixLayoutAttribute_t",
                                                            "const void*", "size_t"]),
    "cublasLtMatmulPreferenceCreate": ("cublasStatus_t", ["cublasLtMatmulPreference_t*"]),
    "cublasLtMatmulPreferenceDestroy": ("cublasStatus_t", ["cublasLtMatmulPreference_t"]),
    "cublasLtMatmulPreferenceSetAttribute": ("cublasStatus_t", ["cublasLtMatmulPreference_t",
                                                                "cublasLtMatmulPreferenceAttributes_t", "const void*",
                                                                "size_t"]),
    "cublasLtMatmulAlgoGetHeuristic": ("cublasStatus_t", [
        "cublasLtHandle_t", "cublasLtMatmulDesc_t", "cublasLtMatrixLayout_t", "cublasLtMatrixLayout_t",
        "cublasLtMatrixLayout_t", "cublasLtMatrixLayout_t", "cublasLtMatmulPreference_t", "int",
        "cublasLtMatmulHeuristicResult_t*", "int*"]),
    "cublasLtMatmul": ("cublasStatus_t", [
        "cublasLtHandle_t", "cublasLtMatmulDesc_t", "const void*", "const void*", "cublasLtMatrixLayout_t",
        "const void*", "cublasLtMatrixLayout_t", "const void*", "const void*", "cublasLtMatrixLayout_t", "void*",
        "cublasLtMatrixLayout_t", "const cublasLtMatmulAlgo_t*", "void*", "size_t", "cudaStream_t"]),
}
_SCALARS = {"cublasStatus_t": ctypes.c_int, "int": ctypes.c_int, "size_t": ctypes.c_size_t,
            "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64}


_OPAQUE = {"cublasLtHandle_t", "cublasLtMatmulDesc_t", "cublasLtMatrixLayout_t", "cublasLtMatmulPreference_t",
           "cudaStream_t"}  # typedefs of pointers to opaque structs


def _ctype(c_type: str):
    """A C parameter type as ctypes passes it: pointers and opaque handles are addresses, enums are ints."""
    if c_type.endswith("*") or c_type in _OPAQUE:
        return ctypes.c_void_p
    return _SCALARS.get(c_type, ctypes.c_int)  # the rest are C enums (int-sized)


def test_the_ctypes_signatures_are_cublaslt_h_prototypes():
    signatures = _lt_binding.CUBLASLT.signatures()
    assert set(signatures) == set(HEADER)
    for symbol, (restype, params) in HEADER.items():
        bound_restype, bound_args = signatures[symbol]
        assert bound_restype is _ctype(restype), symbol
        assert bound_args == [_ctype(p) for p in params], symbol


def test_the_structs_and_attribute_types_have_cublaslt_h_sizes():
    assert ctypes.sizeof(_lt_binding.Algo) == 64  # uint64_t data[8]
    result = _lt_binding.HeuristicResult
    assert ctypes.sizeof(result) == 96
    assert (result.workspace_size.offset, result.state.offset, result.waves_count.offset) == (64, 72, 76)
    # attribute value types (nvmath's attribute-size tables): int32 enums, uint32 epilogue, 64-bit pointer/offsets
    sizes = {"DESC_TRANSA": 4, "DESC_TRANSB": 4, "DESC_POINTER_MODE": 4, "DESC_EPILOGUE": 4, "DESC_BIAS_POINTER": 8,
             "LAYOUT_BATCH_COUNT": 4, "LAYOUT_STRIDED_BATCH_OFFSET": 8, "PREF_MAX_WORKSPACE_BYTES": 8}
    for name, size in sizes.items():
        assert ctypes.sizeof(getattr(_lt_binding, name)[1]) == size, name
    assert all(ctypes.sizeof(ctype) == 4 for _, ctype in _lt_binding.PREF_MIN_ALIGNMENT.values())
    assert (_lt_binding.EPILOGUE_RELU_BIAS, _lt_binding.EPILOGUE_GELU_BIAS) == (6, 36)
    assert set(_lt_plans.EPILOGUE_NAMES) == set(_lt_plans.EPILOGUES.values())
    assert _lt_plans.EPILOGUE_NAMES == {1: "none", 2: "relu", 32: "gelu", 4: "bias", 6: "bias+relu", 36: "bias+gelu"}


def test_products_through_the_ctypes_binding_match_the_emulator():
    fake = FakeLt()
    binding = _lt_binding.CUBLASLT.ctypes(c_library(fake), "(ctypes callbacks)")
    plans, handle = _lt_plans.PlanCache(binding), binding.create()
    assert binding.version() == fake.version() and handle in fake.objects
    rng = np.random.default_rng(9)
    for rows, activation in ((1, "relu"), (16, "gelu"), (64, None)):
        x, w, b = rand(rng, (rows, 12), np.float32), rand(rng, (12, 7), np.float32), rand(rng, (7,), np.float32)
        out = np.full((rows, 7), np.nan, np.float32)
        assert lt_product(binding, plans, handle, x, w, out, b, activation)[0]
        close(out, reference(x, w, b, activation), np.float32)
    a3 = rand(rng, (2, 5, 12), np.float32)
    out3 = np.empty((2, 5, 7), np.float32)
    assert lt_product(binding, plans, handle, a3, w, out3, b, "relu")[0]
    close(out3, reference(a3, w, b, "relu"), np.float32)
    assert fake.heuristic_calls == 4 and fake.matmuls == 4
    plans.close()
    binding.destroy(handle)
    assert fake.objects == {}


def test_the_ctypes_binding_reports_a_failed_status():
    fake = FakeLt(matmul_status=13)
    binding = _lt_binding.CUBLASLT.ctypes(c_library(fake), "(ctypes callbacks)")
    plans, handle = _lt_plans.PlanCache(binding), binding.create()
    failed = r"cublasLtMatmul failed with CUBLAS_STATUS_EXECUTION_FAILED \(13\)"
    with pytest.raises(cg.linalg.CublasError, match=failed):
        lt_product(binding, plans, handle, np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                   np.empty((2, 2), np.float32), None, "relu")


def test_gemm_call_features_first_always_puts_output_columns_on_cublas_rows():
    from cupygraph.linalg._shapes import Geometry, gemm_call

    c_order = Geometry(0, 6, 1)  # a (rows, 6) C-ordered result
    f_order = Geometry(0, 1, 4)  # a (4, 6) F-ordered one
    for m in (1, 4):
        call, copies = gemm_call(m, 3, 6, 1, Geometry(0, 3, 1), Geometry(0, 6, 1), c_order, features_first=True)
        assert copies == () and isinstance(call, GemmCall)
        assert (call.first, call.m, call.n, call.ldc) == ("b", 6, m, 6)
    call, copies = gemm_call(4, 3, 6, 1, Geometry(0, 3, 1), Geometry(0, 6, 1), f_order, features_first=True)
    assert call is None and copies == ("c",)  # computed in a C-ordered temporary
    plain, _ = gemm_call(4, 3, 6, 1, Geometry(0, 3, 1), Geometry(0, 6, 1), f_order)
    assert plain is not None and plain.first == "a"  # cublasGemmEx writes it in place
