"""numpy.linalg and SciPy CSR products as users write them, captured on the host reference (issue 29).

The GPU routes the ``cupy.linalg`` calls and cupyx CSR products that ``linalg/routable.py`` accepts to
cupygraph's cuSOLVER / cuSPARSE routines while a function is recorded (``routes/cupy_linalg.py``); the
host reference routes their NumPy / SciPy twins by the same rule (``routes/numpy_linalg.py``): they
capture, are noted with the GPU's label, compute NumPy's values (NaN where NumPy raises, as the GPU's
routes give), and every other call is still refused, naming the user's line.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from numpy.linalg import solve as solve_by_its_own_name
from replay_helpers import AsItIs, eager_at_padded_size, poison_outputs

import cupygraph as cg

HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8]}
UNROUTED = {**HOST, "route_library_calls": False}
LABEL = "cuSOLVER (at test_routes_linalg_host.py:"


def spd(rng, n, k=3):
    """``n`` well-conditioned symmetric positive definite k x k matrices."""
    m = rng.standard_normal((n, k, k))
    return m @ np.swapaxes(m, -1, -2) + k * np.eye(k)


def gram(x):
    """A well-conditioned 6 x 6 matrix from a batch x (n, 6); zero padding rows add nothing to it."""
    return x.T @ x + x.shape[1] * np.eye(x.shape[1])


def tall(x):
    """A well-conditioned 6 x 4 matrix from x (n, 6) (padding rows add nothing)."""
    return gram(x)[:, :4] + 2 * np.eye(6, 4)


def leaves(value):
    return list(value) if isinstance(value, tuple) else [value]


def assert_same(got, want):
    assert type(got) is type(want) or isinstance(want, np.generic), (type(got), type(want))
    for g, w in zip(leaves(got), leaves(want), strict=True):
        np.testing.assert_array_equal(g, w)
        assert np.asarray(g).dtype == np.asarray(w).dtype


STACKS = {  # one matrix per row of the batch: a padded replay's real rows are the plain call's, bit for bit
    "solve": lambda a: np.linalg.solve(a, a[..., :1] + 1),
    "solve_vector": lambda a: np.linalg.solve(a, np.ones(3)),
    "solve_own_name": lambda a: solve_by_its_own_name(a, a[..., :2]),
    "inv": lambda a: np.linalg.inv(a),
    "cholesky": lambda a: np.linalg.cholesky(a),
    "det": lambda a: np.linalg.det(a),
    "slogdet": lambda a: np.linalg.slogdet(a),
    "float32": lambda a: np.linalg.inv(a.astype(np.float32)),
}


@pytest.mark.parametrize("name", sorted(STACKS))
def test_unchanged_solvers_of_a_batch_of_matrices_capture_and_replay_as_numpy(name):
    fn = STACKS[name]
    graphed = cg.jit(fn, config=HOST)
    rng = np.random.default_rng(0)
    for n in (8, 3, 8, 5, 3, 4):  # fresh matrices every call; 3 and 5 rows are padded with zero matrices
        a = spd(rng, n)
        if graphed.stats().captures:
            poison_outputs(graphed)
        assert_same(graphed(a), fn(a))
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits >= 3, stats.to_dict()
    assert len(stats.routed_calls) == 1 and next(iter(stats.routed_calls)).startswith(LABEL), stats.routed_calls


MATRICES = {  # one matrix from the batch: replays equal the function at the padded batch, bit for bit
    "eigh": lambda x: np.linalg.eigh(gram(x)),
    "eigh_upper": lambda x: np.linalg.eigh(np.triu(gram(x)), UPLO="U"),
    "eigvalsh": lambda x: np.linalg.eigvalsh(gram(x)),
    "svd": lambda x: np.linalg.svd(tall(x)),
    "svd_thin": lambda x: np.linalg.svd(tall(x).T, full_matrices=False),
    "svd_values": lambda x: np.linalg.svd(tall(x), compute_uv=False),
    "qr": lambda x: np.linalg.qr(tall(x)),
    "qr_r": lambda x: np.linalg.qr(tall(x), mode="r"),
    "qr_complete_wide": lambda x: np.linalg.qr(tall(x).T, mode="complete"),
    "norm_2": lambda x: np.linalg.norm(tall(x), 2),
    "norm_minus_2": lambda x: np.linalg.norm(gram(x), -2, axis=(1, 0), keepdims=True),
    "norm_nuc": lambda x: np.linalg.norm(tall(x), "nuc"),
    "lstsq": lambda x: np.linalg.lstsq(tall(x).T, tall(x)[:4, 0], rcond=None),
    "pinv": lambda x: np.linalg.pinv(tall(x)),
    "det": lambda x: np.linalg.det(gram(x)),
    "solve": lambda x: np.linalg.solve(gram(x), tall(x)),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_unchanged_factorisations_of_one_matrix_capture_and_replay_as_numpy(name):
    fn = MATRICES[name]
    graphed = cg.jit(fn, out_batched=False, config=HOST)
    as_it_is = AsItIs(graphed)
    rng = np.random.default_rng(1)
    for n in (8, 5, 8, 3, 5):
        x = rng.standard_normal((n, 6))
        plain = as_it_is(x)
        if graphed.stats().captures:
            poison_outputs(graphed)
        got = graphed(x)
        assert_same(got, fn(x) if plain else eager_at_padded_size(graphed, x))
        for g, w in zip(leaves(got), leaves(fn(x))):  # against the unpadded call: the Gram matrix's rounding
            if np.asarray(w).dtype.kind == "f" and not name.startswith(("eigh", "svd", "qr")):  # (signs of vectors)
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits == 2, stats.to_dict()
    assert any(call.startswith(LABEL) for call in stats.routed_calls), stats.routed_calls


REFUSED = {  # no faithful route for these arguments: refused as the GPU fails them, naming the line
    "eigh_40x40": (lambda x: np.linalg.eigh(x.T @ x)[0], 40, "`cupygraph.linalg.eigh`, which captures for matrices "
                   "up to 32x32"),
    "svd_40_columns": (lambda x: np.linalg.svd(x[:4], compute_uv=False), 40, "up to 32x32"),
    "eigh_of_a_stack": (lambda x: np.linalg.eigh(x.reshape(-1, 3, 2) @ x.reshape(-1, 2, 3))[0], 6, "np.linalg.eigh"),
    "qr_raw": (lambda x: np.linalg.qr(tall(x), mode="raw")[1], 6, "np.linalg.qr"),
    "qr_complete_tall": (lambda x: np.linalg.qr(tall(x), mode="complete")[0], 6, "np.linalg.qr"),
    "lstsq_tall": (lambda x: np.linalg.lstsq(tall(x), x[:6, 0])[0], 6, "np.linalg.lstsq"),
    "pinv_hermitian": (lambda x: np.linalg.pinv(gram(x), hermitian=True), 6, "np.linalg.pinv"),
    "cholesky_upper": (lambda x: np.linalg.cholesky(gram(x), upper=True), 6, "np.linalg.cholesky"),
    # (inv and solve of any dtype run CuPy's own code on the GPU, routed at the library boundary: eigh does not)
    "integers": (lambda x: np.linalg.eigvalsh(np.round(gram(x)).astype(np.int64)), 6, "np.linalg.eigvalsh"),
    "complex": (lambda x: np.linalg.eigvalsh(gram(x) + 0j), 6, "np.linalg.eigvalsh"),
    "matrix_rank": (lambda x: np.linalg.matrix_rank(gram(x)), 6, "np.linalg.matrix_rank"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_calls_without_a_faithful_route_are_refused_naming_the_line(name):
    fn, columns, words = REFUSED[name]
    graphed = cg.jit(fn, out_batched=False, config=HOST)
    x = np.random.default_rng(2).standard_normal((8, columns))
    assert_same(graphed(x), fn(x))  # (the key runs eagerly)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls, stats.to_dict()
    detail = stats.detail("library_call")
    assert words in detail and "cuSOLVER" in detail and "(at test_routes_linalg_host.py:" in detail, detail


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_refuses_np_linalg_as_before(switch, monkeypatch):
    config = UNROUTED if switch == "config" else HOST
    if switch == "environment":
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    fn = STACKS["inv"]
    graphed = cg.jit(fn, config=config)
    a = spd(np.random.default_rng(3), 8)
    assert_same(graphed(a), fn(a))
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls
    assert "np.linalg.inv" in stats.detail("library_call") and "`cupygraph.linalg.inv`" in stats.detail("library_call")


def test_norms_without_a_factorisation_capture_routed_or_not():  # reductions in CuPy: no cuSOLVER to route
    def norms(x):
        return (np.linalg.norm(x), np.linalg.norm(x, axis=1), np.linalg.norm(x, "fro"), np.linalg.norm(x, np.inf),
                np.linalg.norm(x, 1, axis=(0, 1)), np.linalg.norm(x[0], 3))

    graphed = cg.jit(norms, out_batched=(False, True, False, False, False, False), config=UNROUTED)
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.standard_normal((8, 5))
        assert_same(graphed(x), tuple(np.asarray(v) for v in norms(x)))
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits == 2 and not graphed.stats().routed_calls


def test_a_failed_matrix_gives_nan_as_on_the_gpu_the_others_numpys_values():
    graphed = cg.jit(STACKS["inv"], config=HOST)
    rng = np.random.default_rng(5)
    graphed(spd(rng, 8))  # captures
    a = spd(rng, 8)
    a[2] = 0  # singular: NumPy raises for the whole batch; the GPU's route gives NaN for this matrix
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.inv(a)
    got = graphed(a)
    assert graphed.stats().hits == 1 and np.isnan(got[2]).all()
    for i in (0, 1, *range(3, 8)):
        np.testing.assert_array_equal(got[i], np.linalg.inv(a[i]))
    cholesky = cg.jit(lambda x: np.linalg.cholesky(gram(x) * x[0, 0]), out_batched=False, config=HOST)
    x = rng.standard_normal((8, 6))
    x[0, 0] = 1.0
    np.testing.assert_array_equal(cholesky(x), np.linalg.cholesky(gram(x)))  # captures
    x[0, 0] = -1.0  # negative definite: NaN, where NumPy raises
    assert np.isnan(cholesky(x)).all() and cholesky.stats().hits == 1


def test_a_nan_eigenvalue_fails_the_whole_result_as_on_the_gpu():
    fn = MATRICES["eigh"]
    graphed = cg.jit(fn, out_batched=False, config=HOST)
    x = np.random.default_rng(6).standard_normal((8, 6))
    graphed(x)
    x[0, 0] = np.nan
    w, v = graphed(x)
    assert graphed.stats().hits == 1 and np.isnan(w).all() and np.isnan(v).all()


def test_graph_break_ops_of_a_piecewise_recording_run_as_numpys_own():
    """They run eagerly at every replay, unrouted: so they are not routed in the recording either."""
    inverse = cg.graph_break(lambda a: np.linalg.inv(a))
    fn = lambda a: inverse(a * 1.0) + 0.0
    rng = np.random.default_rng(7)
    piecewise = cg.jit(fn, config={**HOST, "mode": "PIECEWISE"})
    full = cg.jit(fn, config=HOST)  # a FULL graph captures the op with the rest: routed
    for n in (8, 8, 3):  # 3 rows: padded with a zero matrix, which NumPy's own inv refuses
        a = spd(rng, n)
        np.testing.assert_array_equal(piecewise(a), fn(a))
        np.testing.assert_array_equal(full(a), fn(a))
    assert not piecewise.stats().routed_calls and piecewise.stats().fallbacks_by_reason == {"raised_on_padding": 1}
    assert full.stats().routed_calls and full.stats().fallbacks == 0


def test_other_threads_keep_numpys_own_while_a_recording_routes():
    seen = []

    def other_thread():
        try:
            np.linalg.inv(np.zeros((2, 2)))
            seen.append("no error")
        except np.linalg.LinAlgError:
            seen.append("LinAlgError")

    def fn(a):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        return np.linalg.inv(a)

    graphed = cg.jit(fn, config=HOST)
    graphed(spd(np.random.default_rng(8), 8))
    assert graphed.stats().routed_calls and seen and set(seen) == {"LinAlgError"}, seen


SPARSE = {  # m: the CSR matrices, made outside the function (converting one inside uploads its index arrays)
    "csr @ x": lambda m, x: (m["csr"] @ x.T).T,
    "x @ csr": lambda m, x: x @ m["csr"],
    "csr.dot(x)": lambda m, x: m["csr"].dot(x.T).T,
    "csr_matrix * x": lambda m, x: (m["csr"] * x.T).T,
    "x * csr_matrix": lambda m, x: x * m["csr"],
    "csr @ vector": lambda m, x: x * (m["csr"] @ x[0])[0],
    "csr_array @ x": lambda m, x: x @ m["csr_array"],
    "float32": lambda m, x: x.astype(np.float32) @ m["float32"],
}


@pytest.mark.parametrize("name", sorted(SPARSE))
def test_unchanged_csr_products_capture_as_the_gpu_routes_them(name):
    sparse = pytest.importorskip("scipy.sparse")
    s = sparse.random(5, 5, density=0.5, format="csr", random_state=1)
    matrices = {"csr": s, "csr_array": sparse.csr_array(s), "float32": s.astype(np.float32)}
    fn = SPARSE[name]
    graphed = cg.jit(lambda x: fn(matrices, x), config=HOST)
    rng = np.random.default_rng(9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)  # the graph reads s's arrays (not arguments)
        for n in (8, 3, 8, 5, 3, 5):
            x = rng.standard_normal((n, 5))
            np.testing.assert_array_equal(graphed(x), fn(matrices, x))  # row by row: padding changes no real row
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits == 3, stats.to_dict()
    label = "cuSPARSE (at test_routes_linalg_host.py:"
    assert stats.routed_calls and all(call.startswith(label) for call in stats.routed_calls), stats.routed_calls


@pytest.mark.parametrize("case", ["csc", "complex", "unrouted"])
def test_csr_products_without_a_route_are_still_refused(case):
    sparse = pytest.importorskip("scipy.sparse")
    s = sparse.random(5, 5, density=0.5, format="csc" if case == "csc" else "csr", random_state=1)
    if case == "complex":
        s = s * (1 + 1j)
    graphed = cg.jit(lambda x: (s @ x.T).T, config=UNROUTED if case == "unrouted" else HOST)
    x = np.random.default_rng(10).standard_normal((8, 5))
    np.testing.assert_array_equal(graphed(x), (s @ x.T).T)
    assert graphed.stats().fallbacks_by_reason == {"library_call": 1} and not graphed.stats().routed_calls
    detail = graphed.stats().detail("library_call")
    assert "cupygraph.linalg.spmm" in detail and "(at test_routes_linalg_host.py:" in detail, detail


def test_the_rule_binds_numpys_and_cupys_signatures_and_refuses_what_it_cannot_bind():
    from cupygraph.linalg.routable import linalg_call, sparse_call

    a, b = np.eye(4), np.ones((4, 2))
    assert linalg_call("solve", (a,), {"b": b}).arrays[1] is b
    assert linalg_call("eigh", (a, "U"), {}).options == {"UPLO": "U"}
    assert linalg_call("pinv", (a,), {}).options["rcond"] == 1e-15 and linalg_call("pinv", (a,), {}).given == {}
    for name, args, kwargs in [("cholesky", (a, True), {}), ("cholesky", (a,), {"upper": True}),
                               ("pinv", (a,), {"rtol": 1e-3}), ("inv", (a, a), {}), ("inv", (a,), {"a": a})]:
        assert linalg_call(name, args, kwargs) is None, (name, kwargs)  # keyword-only, unknown or repeated
    assert linalg_call("eigh", (a,), {"UPLO": "l"}) is None  # (NumPy accepts it, CuPy raises)
    assert linalg_call("eigh", (a.astype(np.float16),), {}) is None and linalg_call("inv", (np.eye(0),), {}) is None
    # CuPy's own code computes inv, solve, det and slogdet of any dtype (its library calls routed)
    assert linalg_call("inv", (a.astype(np.float16),), {}).own_code and linalg_call("det", (a + 0j,), {}).own_code
    assert not linalg_call("cholesky", (np.stack([a @ a.T + 4 * np.eye(len(a))] * 2),), {}).own_code  # (potrfBatched)
    assert linalg_call("lstsq", (np.ones((4, 3)), np.ones(4)), {}) is None  # more rows than columns
    assert linalg_call("lstsq", (np.eye(3, 4), np.ones(3)), {"rcond": 0}) is None  # (NumPy and CuPy differ there)
    assert linalg_call("norm", (a,), {"ord": 2, "axis": (0, 0)}) is None and linalg_call("norm", (a, 2), {})
    assert linalg_call("matrix_rank", (a,), {}) is None

    sparse = pytest.importorskip("scipy.sparse")
    s = sparse.random(4, 3, density=0.5, format="csr", random_state=0)
    assert sparse_call("__matmul__", s, np.ones((3, 2))).options == {"dense_first": False}
    assert sparse_call("__rmatmul__", s, np.ones(4)).options == {"dense_first": True}
    for method, other in [("__matmul__", np.ones((4, 2))), ("__matmul__", s.T), ("__matmul__", 2.0),
                          ("__matmul__", np.ones((3, 2), np.complex128)), ("multiply", np.ones((4, 3)))]:
        assert sparse_call(method, s, other) is None, method
    assert sparse_call("__matmul__", s.tocsc(), np.ones((3, 2))) is None
