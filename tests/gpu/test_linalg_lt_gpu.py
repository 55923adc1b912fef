"""The fused GEMMs (``linalg.linear``, ``gemm(bias=, activation=)``) on cuBLASLt, on a real GPU (issue 31).

* A replay equals an eager call at the captured (padded) shape bit for bit, on fresh random data
  with the static buffers poisoned with NaN first, at batches 1, 16, 64 and 256, float32 and
  float16, each epilogue, under each installed binding (a fresh thread per test, so its handles
  come from that binding).
* Each epilogue against a CuPy reference in float64, within the dtype's tolerance: one row,
  skinny, square and batched shapes, transposed, sliced, broadcast and misaligned operands.
* The issue's layer (1024 wide, float32, bias + ReLU) runs fused at every batch, on the fastest of the
  heuristic's proposals; the algorithm of a shape is chosen once (at the warm-up), never again by
  eager calls or replays.
* A capture by hand allocates nothing once the product ran eagerly; a capture that meets a
  product with no handle or plan yet is refused with ``CaptureError``.
"""

from __future__ import annotations

import ctypes
import gc
import importlib

import numpy as np
import pytest
from extras import needs_nvmath
from replay_helpers import poison_static_buffers, replayed, run_threads

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.linalg import _lt_binding, _lt_plans  # noqa: E402

BATCHES = (1, 16, 64, 256)
MAX = 256
FULL = {"mode": "FULL", "max_capture_size": MAX}
TOL = {"e": 2e-2, "f": 2e-4, "d": 1e-10}
# cuBLASLt's GELU epilogue may evaluate tanh with a faster approximation than the float64 reference
TOL_GELU = {"e": 2e-2, "f": 2e-3, "d": 1e-5}
ACTIVATIONS = (None, "relu", "gelu")


def rand(rng, shape, dtype, scale=1.0):
    return cupy.asarray((scale * rng.standard_normal(shape)).astype(dtype))


def padded_size(n):
    return min(s for s in cg.default_capture_sizes(MAX) if s >= n)


def reference(x, w, bias, activation, alpha=1.0, beta=0.0, c=None):
    """The fused product from its definition, in float64 with CuPy."""
    r = alpha * cupy.matmul(x.astype(np.float64), w.astype(np.float64))
    if c is not None and beta != 0:
        r = r + beta * c.astype(np.float64)
    if bias is not None:
        r = r + bias.astype(np.float64)
    if activation == "relu":
        r = cupy.where(r > 0, r, 0)
    elif activation == "gelu":
        r = 0.5 * r * (1 + cupy.tanh(np.sqrt(2 / np.pi) * (r + 0.044715 * r**3)))
    return cupy.asnumpy(r)


def close(got, want, dtype, what="", activation=None):
    tol = (TOL_GELU if activation == "gelu" else TOL)[np.dtype(dtype).char]
    np.testing.assert_allclose(cupy.asnumpy(got).astype(np.float64), want, rtol=tol,
                               atol=tol * max(1.0, float(np.abs(want).max())), err_msg=what)


def in_thread(fn):
    """``fn()`` in a new thread (new cuBLAS/cuBLASLt handles, from the binding the environment names)."""
    errors = run_threads(lambda _: fn(), 1)
    if errors:
        raise errors[0]


def layer(activation, with_bias):
    if with_bias:
        return (lambda x, w, b: cg.linalg.linear(x, w, b, activation=activation)), (1, 2)
    return (lambda x, w: cg.linalg.linear(x, w, activation=activation)), (1,)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_layers_replay_equal_eager_bit_for_bit(binding, dtype):
    def check():
        assert cg.linalg.binding_info()["lt_binding"] == binding
        rng = np.random.default_rng(31)
        k, n = 256, 192
        w, b = rand(rng, (k, n), dtype, 1 / np.sqrt(k)), rand(rng, (n,), dtype)
        for activation in ACTIVATIONS:
            for with_bias in (True, False):
                fn, consts = layer(activation, with_bias)
                args = (w, b) if with_bias else (w,)
                graphed = cg.jit(fn, constant_argnums=consts, config=FULL)
                for rows in (*BATCHES, 5, 16, 1, 256):
                    x = rand(rng, (rows, k), dtype)
                    poison_static_buffers(graphed, cupy)
                    got, replay = replayed(graphed, x, *args)
                    x_pad = cupy.zeros((padded_size(rows) if replay else rows, k), dtype)
                    x_pad[:rows] = x
                    eager = fn(x_pad, *args)[:rows]  # the shape that ran: the same cuBLASLt algorithm
                    what = f"{np.dtype(dtype)} {activation} bias={with_bias} rows={rows} replay={replay}"
                    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(eager), err_msg=what)
                    close(got, reference(x, w, b if with_bias else None, activation), dtype, what, activation)
                stats = graphed.stats()
                assert stats.fallbacks == 0, stats.last_detail_by_reason
                assert stats.hits >= 3

    in_thread(check)


def test_the_issue_layer_runs_fused_at_every_batch_and_replays_bit_for_bit():
    """4 layers of 1024 -> 1024, float32, bias + ReLU: cuBLASLt runs each with its epilogue fused."""
    rng = np.random.default_rng(1024)
    weights = [rand(rng, (1024, 1024), np.float32, np.sqrt(2 / 1024)) for _ in range(4)]
    biases = [rand(rng, (1024,), np.float32, 0.1) for _ in range(4)]

    def mlp(x, *params):
        for w, b in zip(params[0::2], params[1::2]):
            x = cg.linalg.linear(x, w, b, activation="relu")
        return x

    params = [p for pair in zip(weights, biases) for p in pair]
    graphed = cg.jit(mlp, constant_argnums=tuple(range(1, 9)), config=FULL)
    replays = 0
    for rows in (*BATCHES, *BATCHES):
        x = rand(rng, (rows, 1024), np.float32)
        poison_static_buffers(graphed, cupy)
        got, replay = replayed(graphed, x, *params)
        replays += replay
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(mlp(x, *params)), err_msg=f"rows={rows}")
        want = x
        for w, b in zip(weights, biases):
            want = cupy.asarray(reference(want, w, b, "relu"))
        close(got, cupy.asnumpy(want), np.float32, f"rows={rows}")
    assert graphed.stats().fallbacks == 0 and replays == len(BATCHES)  # the second pass replays every batch
    plans = [p for p in cg.linalg.gemm_plans() if (p["m"], p["k"], p["epilogue"]) == (1024, 1024, "bias+relu")
             and p["dtype"] == "float32"]
    assert {p["n"] for p in plans} >= set(BATCHES), plans
    assert all(p["fused"] for p in plans), [p for p in plans if not p["fused"]]
    # Timed (CUPYGRAPH_GEMM_TUNING defaults to timed): where the heuristic proposed several kernels, each
    # has a measured time and the one kept is the fastest of them.
    for p in plans:
        if p["proposals"] > 1:
            times = p["microseconds"]
            assert len(times) == p["proposals"] and times[p["chosen"]] == min(times), p


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_each_epilogue_matches_a_cupy_reference(dtype):
    rng = np.random.default_rng(7)
    cases = [(rows, 1024, 1024) for rows in BATCHES] + [(64, 4096, 48), (256, 48, 2048), (512, 512, 512), (3, 5, 7)]
    for rows, k, n in cases:
        x, w = rand(rng, (rows, k), dtype), rand(rng, (k, n), dtype, 1 / np.sqrt(k))
        b = rand(rng, (n,), dtype)
        for activation in ACTIVATIONS:
            for bias in (b, None):
                got = cg.linalg.linear(x, w, bias, activation=activation)
                close(got, reference(x, w, bias, activation), dtype,
                      f"{rows}x{k}x{n} {np.dtype(dtype)} {activation} bias={bias is not None}", activation)
    # batched (a broadcast weight; a batch of weights with alpha, beta, c), transposed, sliced, misaligned
    a, b3 = rand(rng, (4, 16, 64), dtype), rand(rng, (4, 64, 32), dtype, 1 / 8)
    w, c, bias = rand(rng, (64, 32), dtype, 1 / 8), rand(rng, (4, 16, 32), dtype), rand(rng, (33,), dtype)
    close(cg.linalg.gemm(a, w, bias=bias[1:], activation="gelu"), reference(a, w, bias[1:], "gelu"), dtype, "broadcast",
          "gelu")
    out = c.copy()
    cg.linalg.gemm(a, b3, out, alpha=0.5, beta=-2.0, out=out, bias=bias[:32], activation="relu")
    close(out, reference(a, b3, bias[:32], "relu", 0.5, -2.0, c), dtype, "batched with c")
    pytorch_style = cupy.ascontiguousarray(w.T)  # (out, in): passed as its transpose, a view
    close(cg.linalg.linear(a[0], pytorch_style.T, bias[:32]), reference(a[0], w, bias[:32], None), dtype, "w.T")
    close(cg.linalg.gemm(a[0], pytorch_style, trans_b=True, bias=bias[:32], activation="relu"),
          reference(a[0], w, bias[:32], "relu"), dtype, "trans_b")
    close(cg.linalg.linear(a[:, ::2, :], w, bias[:32]), reference(a[:, ::2, :], w, bias[:32], None), dtype, "sliced")
    close(cg.linalg.linear(a[0, :, 1:33], w[1:33], bias[1:]), reference(a[0, :, 1:33], w[1:33], bias[1:], None), dtype,
          "unaligned views")


def test_the_common_epilogues_run_fused_for_float32_and_float16():
    rng = np.random.default_rng(8)
    for dtype in (np.float32, np.float16):
        for rows in BATCHES:
            x, w, b = rand(rng, (rows, 256), dtype), rand(rng, (256, 128), dtype, 1 / 16), rand(rng, (128,), dtype)
            for activation in ACTIVATIONS:
                cg.linalg.linear(x, w, b, activation=activation)
            cg.linalg.linear(x, w)
    plans = [p for p in cg.linalg.gemm_plans() if (p["m"], p["k"]) == (128, 256)]
    wanted = {"bias", "bias+relu", "bias+gelu"}  # (a plain product is cublasGemmEx's: no plan)
    unfused = [p for p in plans if p["epilogue"] in wanted and not p["fused"]]
    assert not unfused, unfused
    assert {(p["dtype"], p["epilogue"], p["n"]) for p in plans} >= {
        (dt, e, n) for dt in ("float32", "float16") for e in wanted for n in BATCHES}


def test_the_algorithm_is_chosen_once_per_shape_at_the_warm_up(monkeypatch):
    asked = []
    ask = _lt_plans._ask_heuristic
    monkeypatch.setattr(_lt_plans, "_ask_heuristic", lambda *args: asked.append(args[2].key) or ask(*args))
    rng = np.random.default_rng(9)
    w, b = rand(rng, (96, 80), np.float32), rand(rng, (80,), np.float32)
    fn = lambda x, w, b: cg.linalg.linear(x, w, b, activation="gelu")
    graphed = cg.jit(fn, constant_argnums=(1, 2), config={"mode": "FULL", "capture_sizes": [8, 24]})
    graphed(rand(rng, (8, 96), np.float32), w, b)  # warm-up (asks), capture, then the call's own run
    first = len(asked)
    assert first <= 1  # at most once (another test of this process may have chosen this key already)
    for rows in (8, 5, 8, 3):
        graphed(rand(rng, (rows, 96), np.float32), w, b)
        fn(rand(rng, (8, 96), np.float32), w, b)  # eager calls of the captured shape: chosen already
    assert len([k for k in asked if k.call.n == 8]) == first
    assert graphed.stats().replays >= 2 and graphed.stats().fallbacks == 0


def test_a_capture_by_hand_allocates_nothing_and_replays_the_eager_bits():
    rng = np.random.default_rng(10)
    x, w, b = rand(rng, (16, 128), np.float32), rand(rng, (128, 64), np.float32), rand(rng, (64,), np.float32)
    out = cupy.empty((16, 64), np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)

    class Allocations(cupy.cuda.MemoryHook):
        name = "cupygraph-test-allocations"

        def __init__(self):
            super().__init__()
            self.count = 0

        def malloc_preprocess(self, **kwargs):
            self.count += 1

        def alloc_preprocess(self, **kwargs):
            self.count += 1

    with stream:
        cg.linalg.linear(x, w, b, activation="relu", out=out)  # eagerly first: handle, workspace, plan
        want = cupy.asnumpy(out)
        out.fill(np.nan)
        allocations = Allocations()
        stream.begin_capture()
        try:
            with allocations:
                cg.linalg.linear(x, w, b, activation="relu", out=out)
        finally:
            graph = stream.end_capture()
        assert allocations.count == 0
        graph.launch(stream)
        stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), want)


def test_a_capture_without_a_handle_or_plan_is_refused():
    def check():
        rng = np.random.default_rng(11)
        x, w = rand(rng, (4, 32), np.float32), rand(rng, (32, 8), np.float32)
        out = cupy.empty((4, 8), np.float32)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            # A new thread has no cuBLASLt handle; prepare() makes it and the stream's workspace, and a
            # shape no eager call has planned is still refused.
            for expected in (r"no cuBLASLt handle for stream .* cupygraph\.linalg\.prepare\(\)",
                             r"no cuBLASLt plan for a 8x4x32 float32 GEMM .* run the function once"):
                stream.begin_capture()
                try:
                    with pytest.raises(cg.CaptureError, match=expected):
                        cg.linalg.linear(x, w, activation="relu", out=out)
                finally:
                    stream.end_capture()
                cg.linalg.prepare()
            cg.linalg.linear(x, w, activation="relu", out=out)  # eagerly: now the capture finds its plan
            want = cupy.asnumpy(out)
            out.fill(np.nan)
            stream.begin_capture()
            try:
                cg.linalg.linear(x, w, activation="relu", out=out)
            finally:
                graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
            np.testing.assert_array_equal(cupy.asnumpy(out), want)

    in_thread(check)


def test_relu_of_nan_follows_the_host_reference():
    """cuBLASLt's ReLU epilogue keeps a NaN; the host reference (and the unfused kernel) must agree."""
    x = cupy.asarray(np.array([[np.nan, 1.0], [2.0, -3.0]], np.float32))
    eye = cupy.eye(2, dtype=np.float32)
    got = cupy.asnumpy(cg.linalg.linear(x, eye, cupy.zeros(2, np.float32), activation="relu"))
    want = cg.linalg.linear(cupy.asnumpy(x), np.eye(2, dtype=np.float32), np.zeros(2, np.float32), activation="relu")
    np.testing.assert_array_equal(got, want)


def test_cublaslt_handles_are_released_with_the_graphs(binding):
    gc.collect()
    base = cg.linalg.release_unused()

    def capture():
        rng = np.random.default_rng(12)
        w, b = rand(rng, (16, 16), np.float32), rand(rng, (16,), np.float32)
        graphed = cg.jit(lambda x, w, b: cg.linalg.linear(x, w, b, activation="relu"), constant_argnums=(1, 2),
                         config=FULL)
        for rows in (4, 4, 9):
            graphed(rand(rng, (rows, 16), np.float32), w, b)
        return graphed, w, b, cg.linalg.resources()

    result = {}
    in_thread(lambda: result.update(value=capture()))
    graphed, w, b, during = result.pop("value")
    assert during["lt_handles"] == base["lt_handles"] + 1
    x = rand(np.random.default_rng(13), (4, 16), np.float32)  # replays on the ended thread's handle
    close(graphed(x, w, b), reference(x, w, b, "relu"), np.float32)
    graphed.clear()
    del graphed
    gc.collect()
    assert cg.linalg.release_unused() == base


def test_lt_enums_and_attribute_sizes_match_nvmath():
    needs_nvmath("the nvmath cuBLASLt binding")
    lt = importlib.import_module("nvmath.bindings.cublasLt")
    epilogue = lt.Epilogue
    assert (_lt_binding.EPILOGUE_DEFAULT, _lt_binding.EPILOGUE_RELU, _lt_binding.EPILOGUE_BIAS,
            _lt_binding.EPILOGUE_GELU, _lt_binding.EPILOGUE_RELU_BIAS, _lt_binding.EPILOGUE_GELU_BIAS) == (
        epilogue.DEFAULT, epilogue.RELU, epilogue.BIAS, epilogue.GELU, epilogue.RELU_BIAS, epilogue.GELU_BIAS)
    desc, layout, pref = lt.MatmulDescAttribute, lt.MatrixLayoutAttribute, lt.MatmulPreferenceAttribute
    ours = {
        (desc, "TRANSA"): _lt_binding.DESC_TRANSA, (desc, "TRANSB"): _lt_binding.DESC_TRANSB,
        (desc, "POINTER_MODE"): _lt_binding.DESC_POINTER_MODE, (desc, "EPILOGUE"): _lt_binding.DESC_EPILOGUE,
        (desc, "BIAS_POINTER"): _lt_binding.DESC_BIAS_POINTER,
        (layout, "BATCH_COUNT"): _lt_binding.LAYOUT_BATCH_COUNT,
        (layout, "STRIDED_BATCH_OFFSET"): _lt_binding.LAYOUT_STRIDED_BATCH_OFFSET,
        (pref, "MAX_WORKSPACE_BYTES"): _lt_binding.PREF_MAX_WORKSPACE_BYTES,
        **{(pref, f"MIN_ALIGNMENT_{x.upper()}_BYTES"): spec for x, spec in _lt_binding.PREF_MIN_ALIGNMENT.items()},
    }
    sizes = {desc: "get_matmul_desc_attribute_dtype", layout: "get_matrix_layout_attribute_dtype",
             pref: "get_matmul_preference_attribute_dtype"}
    for (enum, name), (attr, ctype) in ours.items():
        assert attr == getattr(enum, name), name
        size_of = getattr(lt, sizes[enum], None)
        if size_of is not None:  # nvmath's table of each attribute's value type
            assert np.dtype(size_of(attr)).itemsize == ctypes.sizeof(ctype), name
    assert lt.PointerMode.HOST == 0 and lt.PointerMode.DEVICE == 1


def test_the_unfused_epilogue_without_a_bias_replays_as_eager_and_adds_no_memset(monkeypatch):
    """A key cuBLASLt has no algorithm for runs cublasGemmEx, then one elementwise kernel. Without a bias
    that kernel adds a host scalar zero: its graph has no more memset nodes than the same layer with a
    zero bias vector (a device zero made per call was one more memset node in every capture)."""
    from cupygraph.diagnostics.topology import function_topology

    monkeypatch.setattr(_lt_plans, "_choices", {})
    monkeypatch.setattr(_lt_plans, "_choice", lambda *args: _lt_plans.Choice(None, "forced unfused by the test"))

    def check():
        rng = np.random.default_rng(15)
        w, zero = rand(rng, (64, 48), np.float32), cupy.zeros(48, np.float32)
        memsets = {}
        for with_bias in (False, True):
            fn = (lambda x, w, b: cg.linalg.linear(x, w, b, activation="relu")) if with_bias else \
                (lambda x, w: cg.linalg.linear(x, w, activation="relu"))
            args = (w, zero) if with_bias else (w,)
            graphed = cg.jit(fn, constant_argnums=tuple(range(1, 1 + len(args))),
                             config={"mode": "FULL", "capture_sizes": [8]})
            graphed(rand(rng, (8, 64), np.float32), *args)  # warm-up and capture
            x = rand(rng, (8, 64), np.float32)
            poison_static_buffers(graphed, cupy)
            got, replay = replayed(graphed, x, *args)
            assert replay
            np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(fn(x, *args)))
            [graph] = function_topology(graphed).values()
            memsets[with_bias] = graph["nodes_by_kind"].get("memset", 0)
        assert cg.linalg.gemm_plans() and not any(plan["fused"] for plan in cg.linalg.gemm_plans())
        assert memsets[False] == memsets[True], memsets

    in_thread(check)
