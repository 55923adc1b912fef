"""cupy.linalg and cupyx CSR products as users write them, captured unchanged (issue 29).

Each function below is plain CuPy. Under ``jit`` it must capture (no fallback), the routed calls be in the
statistics as ``cuSOLVER`` / ``cuSPARSE`` and this file's line, and every call equal eager CuPy on the
same fresh random arrays: bit for bit where the route runs the routine CuPy runs with CuPy's arguments
(one matrix: ``solve``, ``inv``, ``cholesky``, ``qr``), else within the bounds docs/ROUTING.md states.
Batches are exactly a capture size (the matrix rows), so nothing is padded; outputs are poisoned with
NaN before each replay.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from replay_helpers import replayed

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.pytree import flatten  # noqa: E402

SIZES = [8, 16]
CONFIG = {"mode": "FULL", "capture_sizes": SIZES}
HERE = "test_routes_linalg_gpu.py"
DTYPES = [np.float32, np.float64]


def eps(dtype):
    return float(np.finfo(dtype).eps)


def host(value):
    return [cupy.asnumpy(v).astype(np.float64) if isinstance(v, cupy.ndarray) else np.asarray(v, np.float64)
            for v in (value if isinstance(value, tuple) else (value,))]


def poison(graphed):
    for entry in graphed.registry.entries():
        for leaf in flatten(entry.cudagraph.outputs, lambda v: isinstance(v, cupy.ndarray))[0]:
            if leaf.dtype.kind in "fc":
                leaf.fill(np.nan)


def orthogonal(rng, n):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def symmetric(rng, n, dtype):
    """A symmetric matrix with eigenvalues 1, 2, ..., n (gaps of 1)."""
    q = orthogonal(rng, n)
    return cupy.asarray((q * np.arange(1.0, n + 1)) @ q.T).astype(dtype)


def spectral(rng, m, n, dtype):
    """An m x n matrix with singular values 1, 2, ..., min(m, n) (gaps of 1)."""
    k = min(m, n)
    u, v = orthogonal(rng, m)[:, :k], orthogonal(rng, n)[:, :k]
    return cupy.asarray((u * np.arange(1.0, k + 1)) @ v.T).astype(dtype)


def well_conditioned(rng, shape, dtype):
    """Random matrices (the last two axes) plus max(m, n) on the diagonal."""
    return cupy.asarray(rng.standard_normal(shape) + max(shape[-2:]) * np.eye(*shape[-2:])).astype(dtype)


def rand(rng, shape, dtype):
    return cupy.asarray(rng.standard_normal(shape)).astype(dtype)


def spd(rng, shape, dtype):
    m = rng.standard_normal(shape)
    return cupy.asarray(m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def check_routed(fn, make, compare, *, calls=4, seed=0, library="cuSOLVER"):
    """``fn`` jitted captures with its calls routed; every call equals eager CuPy on the same arrays by
    ``compare(got, want, args)`` (outputs poisoned before each replay)."""
    rng = np.random.default_rng(seed)
    graphed = cg.jit(fn, out_batched=False, config=CONFIG)
    replays = 0
    for i in range(calls):
        args = make(rng)
        if i:
            poison(graphed)
        got, replay = replayed(graphed, *args)
        want = fn(*args)  # eager: CuPy's own
        assert type(got) is type(want) and len(host(got)) == len(host(want))
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        compare(got, want, args)
        replays += replay
    stats = graphed.stats()
    assert stats.fallbacks == 0, stats.to_dict()["last_detail_by_reason"]
    assert replays == calls - 1, stats.to_dict()
    # (CuPy's own LU of stacked or small matrices reaches cuBLAS getrfBatched: noted as cuBLAS)
    libraries = ("cuSOLVER", "cuBLAS") if library == "cuSOLVER" else (library,)
    assert any(call.startswith(tuple(f"{lib} (at {HERE}:" for lib in libraries)) for call in stats.routed_calls), \
        stats.routed_calls
    return graphed


def bit_for_bit(got, want, args):
    for g, w in zip(host(got), host(want)):
        assert np.array_equal(g, w), f"max |got - want| {np.abs(g - w).max():.3g}"


# -- the same routine with CuPy's arguments: bit for bit ----------------------------------------------------

SAME_ROUTINE = {
    "solve": (lambda a, b: cupy.linalg.solve(a, b), lambda rng, t: (well_conditioned(rng, (16, 16), t),
                                                                    rand(rng, (16, 3), t))),
    "solve_vector": (lambda a, b: cupy.linalg.solve(a, b), lambda rng, t: (well_conditioned(rng, (16, 16), t),
                                                                           rand(rng, (16,), t))),
    "inv": (lambda a: cupy.linalg.inv(a), lambda rng, t: (well_conditioned(rng, (16, 16), t),)),
    "inv_fortran_order": (lambda a: cupy.linalg.inv(a.T), lambda rng, t: (well_conditioned(rng, (16, 16), t),)),
    "inv_strided_view": (lambda a: cupy.linalg.inv(a[:, ::-1]), lambda rng, t: (well_conditioned(rng, (8, 8), t),)),
    "cholesky": (lambda a: cupy.linalg.cholesky(a), lambda rng, t: (spd(rng, (16, 16), t),)),
    "qr": (lambda a: cupy.linalg.qr(a), lambda rng, t: (well_conditioned(rng, (16, 12), t),)),
    "qr_wide": (lambda a: cupy.linalg.qr(a), lambda rng, t: (well_conditioned(rng, (8, 12), t),)),
    "qr_r": (lambda a: cupy.linalg.qr(a, mode="r"), lambda rng, t: (well_conditioned(rng, (16, 12), t),)),
    "qr_complete_wide": (lambda a: cupy.linalg.qr(a, "complete"), lambda rng, t: (well_conditioned(rng, (8, 12), t),)),
    # CuPy's own code with its library calls routed (cuBLAS batched LU, cuSOLVER getrf): CuPy's result
    "solve_batched": (lambda a, b: cupy.linalg.solve(a, b), lambda rng, t: (well_conditioned(rng, (16, 5, 5), t),
                                                                             rand(rng, (16, 5, 2), t))),
    "solve_batched_vector": (lambda a, b: cupy.linalg.solve(a, b),
                             lambda rng, t: (well_conditioned(rng, (16, 5, 5), t), rand(rng, (5,), t))),
    "inv_batched": (lambda a: cupy.linalg.inv(a), lambda rng, t: (well_conditioned(rng, (16, 5, 5), t),)),
    "det": (lambda a: cupy.linalg.det(a), lambda rng, t: (well_conditioned(rng, (16, 16), t) / 16,)),
    "det_batched": (lambda a: cupy.linalg.det(a), lambda rng, t: (well_conditioned(rng, (16, 5, 5), t),)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SAME_ROUTINE))
def test_one_matrix_solvers_replay_cupys_result_bit_for_bit(name, dtype):
    fn, make = SAME_ROUTINE[name]
    check_routed(fn, lambda rng: make(rng, dtype), bit_for_bit)


# -- another routine: within the stated bounds ---------------------------------------------------------------


def relative_to(bound):
    """compare: |got - want| <= bound(args, dtype) * max(|want|, 1), per output."""
    def compare(got, want, args):
        dtype = args[0].dtype
        for g, w in zip(host(got), host(want)):
            scale = max(float(np.abs(w).max(initial=0)), 1.0)
            assert np.abs(g - w).max(initial=0) <= bound(args, dtype) * scale, (np.abs(g - w).max(), scale)
    return compare


def absolute(bound):
    """compare: |got - want| <= bound(args, dtype), per output."""
    def compare(got, want, args):
        for g, w in zip(host(got), host(want)):
            assert np.abs(g - w).max(initial=0) <= bound(args, args[0].dtype), np.abs(g - w).max()
    return compare


def matrices(a):
    return cupy.asnumpy(a).astype(np.float64).reshape(-1, *a.shape[-2:])


def condition(a):
    return float(max(np.linalg.cond(m) for m in matrices(a)))


def lu_bound(args, dtype):  # each result backward stable: they differ by at most ~ n eps cond(a) (relative)
    return 16 * args[0].shape[-1] * eps(dtype) * condition(args[0])


def det_bound(args, dtype):  # d log|det| = tr(a^-1 da): n^2 eps cond(a)
    n = args[0].shape[-1]
    return 16 * n * n * eps(dtype) * condition(args[0])


def spectral_bound(args, dtype):  # Weyl: |d sigma| <= |da|_2 ~ n eps |a|_2 for each eigen/singular value
    return 16 * max(args[0].shape[-2:]) * eps(dtype) * max(np.linalg.norm(m, 2) for m in matrices(args[0]))


def nuclear_bound(args, dtype):  # a sum of min(m, n) singular values
    return min(args[0].shape[-2:]) * spectral_bound(args, dtype)


OTHER_ROUTINE = {  # (fn, make, compare): batched Cholesky (CuPy: potrfBatched, not routed), eigh, svd and kin
    "cholesky_batched": (lambda a: cupy.linalg.cholesky(a), lambda rng, t: (spd(rng, (16, 5, 5), t),),
                         relative_to(lu_bound)),
    "eigvalsh": (lambda a: cupy.linalg.eigvalsh(a), lambda rng, t: (symmetric(rng, 16, t),),
                 absolute(spectral_bound)),
    "svd_values": (lambda a: cupy.linalg.svd(a, compute_uv=False), lambda rng, t: (spectral(rng, 16, 12, t),),
                   absolute(spectral_bound)),
    "norm_2": (lambda a: cupy.linalg.norm(a, 2), lambda rng, t: (spectral(rng, 16, 12, t),),
               absolute(spectral_bound)),
    "norm_minus_2": (lambda a: cupy.linalg.norm(a, -2, axis=(1, 0), keepdims=True),
                     lambda rng, t: (spectral(rng, 8, 12, t),), absolute(spectral_bound)),
    "norm_nuc": (lambda a: cupy.linalg.norm(a, "nuc"), lambda rng, t: (spectral(rng, 16, 16, t),),
                 absolute(nuclear_bound)),
    "pinv": (lambda a: cupy.linalg.pinv(a), lambda rng, t: (spectral(rng, 16, 12, t),), relative_to(lu_bound)),
    "lstsq": (lambda a, b: cupy.linalg.lstsq(a, b, rcond=None)[0],
              lambda rng, t: (spectral(rng, 8, 12, t), rand(rng, (8, 3), t)), relative_to(lu_bound)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(OTHER_ROUTINE))
def test_other_routines_replay_within_the_stated_bounds(name, dtype):
    fn, make, compare = OTHER_ROUTINE[name]
    check_routed(fn, lambda rng: make(rng, dtype), compare)


def aligned(got, want):
    """``got``'s columns with the signs of ``want``'s (eigen/singular vectors are defined up to sign)."""
    signs = np.sign(np.sum(got * want, axis=0))
    return got * np.where(signs == 0, 1, signs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_replays_cupys_eigenpairs_within_the_bound(uplo, dtype):
    def compare(got, want, args):
        (w, v), (w0, v0), a = host(got), host(want), cupy.asnumpy(args[0]).astype(np.float64)
        n, tol = a.shape[0], 16 * a.shape[0] * eps(dtype)
        assert np.abs(w - w0).max() <= tol * n  # |a|_2 = n
        assert np.abs(aligned(v, v0) - v0).max() <= tol * n  # eigenvalue gaps of 1
        assert np.abs(a @ v - v * w).max() <= tol * n and np.abs(v.T @ v - np.eye(n)).max() <= tol

    check_routed(lambda a: cupy.linalg.eigh(a, UPLO=uplo), lambda rng: (symmetric(rng, 16, dtype),), compare)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(16, 12), (8, 12)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_replays_cupys_factors_within_the_bound(shape, full_matrices, dtype):
    def compare(got, want, args):
        (u, s, vh), (u0, s0, vh0), a = host(got), host(want), cupy.asnumpy(args[0]).astype(np.float64)
        k, tol = min(shape), 16 * max(shape) * eps(dtype)
        assert np.abs(s - s0).max() <= tol * k  # |a|_2 = k
        assert np.abs(aligned(u[:, :k], u0[:, :k]) - u0[:, :k]).max() <= tol * k  # singular value gaps of 1
        assert np.abs(aligned(vh[:k].T, vh0[:k].T) - vh0[:k].T).max() <= tol * k
        assert np.abs((u[:, :k] * s) @ vh[:k] - a).max() <= tol * k
        assert np.abs(u.T @ u - np.eye(u.shape[1])).max() <= tol
        assert np.abs(vh @ vh.T - np.eye(vh.shape[0])).max() <= tol

    check_routed(lambda a: cupy.linalg.svd(a, full_matrices=full_matrices),
                 lambda rng: (spectral(rng, *shape, dtype),), compare)


def test_slogdet_and_lstsq_keep_cupys_results_and_types():
    def fn(a, b):
        sign, logdet = cupy.linalg.slogdet(a)
        x, residuals, rank, s = cupy.linalg.lstsq(a[:, :12].T.copy(), b, rcond=-1)
        return sign, logdet, x, residuals, rank, s

    def compare(got, want, args):
        wide = args[0][:, :12].T
        assert got[3].shape == want[3].shape == (0,) and got[4].dtype == want[4].dtype
        assert int(got[4]) == int(want[4]) == 12 and int(got[0]) == int(want[0])
        assert abs(float(got[1]) - float(want[1])) <= det_bound(args, np.float64)
        relative_to(lu_bound)(got[2], want[2], (wide,))
        absolute(spectral_bound)(got[5], want[5], (wide,))

    check_routed(fn, lambda rng: (well_conditioned(rng, (16, 16), np.float64), rand(rng, (12, 2), np.float64)),
                 compare)


# -- numerical failures: CuPy's own values where its code runs; NaN where cupygraph.linalg's routes run ------


def test_a_singular_or_indefinite_matrix_gives_nan_in_a_replay():
    rng = np.random.default_rng(11)
    solve = cg.jit(lambda a, b: cupy.linalg.solve(a, b), out_batched=False, config=CONFIG)
    cholesky = cg.jit(lambda a: cupy.linalg.cholesky(a), out_batched=False, config=CONFIG)
    slogdet = cg.jit(lambda a: cupy.linalg.slogdet(a), out_batched=False, config=CONFIG)
    a, b = well_conditioned(rng, (16, 5, 5), np.float64), rand(rng, (16, 5, 1), np.float64)
    solve(a, b), cholesky(spd(rng, (16, 5, 5), np.float64)), slogdet(a)  # capture
    a[3] = 0  # singular: solve is CuPy's own code (its library calls routed), so a replay gives what CuPy gives
    x = solve(a, b)
    assert solve.stats().hits == 1 and np.array_equal(cupy.asnumpy(x), cupy.asnumpy(cupy.linalg.solve(a, b)),
                                                      equal_nan=True)
    assert not bool(cupy.isnan(x[:3]).any())
    indefinite = spd(rng, (16, 5, 5), np.float64)
    indefinite[5] *= -1
    low = cholesky(indefinite)
    assert bool(cupy.isnan(low[5]).all()) and not bool(cupy.isnan(low[6:]).any())
    sign, logdet = slogdet(a)  # a singular matrix has a determinant: 0 (sign 0, log -inf), as CuPy's
    assert float(sign[3]) == 0 and float(logdet[3]) == -np.inf and bool((sign[:3] != 0).all())
    want_sign, want_logdet = cupy.linalg.slogdet(a)
    assert float(want_sign[3]) == 0 and float(want_logdet[3]) == -np.inf


# -- no route for the arguments: CuPy's own, and the capture fails naming the line -----------------------------


UNROUTED = {
    "eigh_40x40": (lambda x, a: x * cupy.linalg.eigh(a)[0][0], (40, 40), "cupygraph.linalg.eigh`, which captures "
                   "for matrices up to 32x32"),
    "eigh_of_a_stack": (lambda x, a: x * cupy.linalg.eigh(a)[0][0, 0], (3, 4, 4), "cupygraph.linalg.eigh"),
    "lstsq_tall": (lambda x, a: x * cupy.linalg.lstsq(a, a[:, 0])[0][0], (6, 4), "cupygraph.linalg.solve"),
    # (complex inv and solve run CuPy's own code, their library calls routed: eigh of complex is not routed)
    "complex": (lambda x, a: x * cupy.linalg.eigvalsh(a + a.T + 0j)[0], (4, 4), "cupygraph.linalg"),
}


@pytest.mark.parametrize("name", sorted(UNROUTED))
def test_calls_without_a_route_fail_the_capture_naming_the_line_and_the_replacement(name):
    fn, shape, words = UNROUTED[name]
    rng = np.random.default_rng(12)
    a = well_conditioned(rng, shape, np.float64)
    if name.startswith("eigh"):
        a = a + cupy.swapaxes(a, -1, -2)
    graphed = cg.jit(fn, constant_argnums=1, config=CONFIG)
    x = cupy.asarray(rng.standard_normal((16, 2)))
    assert np.allclose(cupy.asnumpy(graphed(x, a)), cupy.asnumpy(fn(x, a)))
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls, stats.to_dict()
    detail = stats.detail("library_call")
    assert "cuSOLVER" in detail and f"(at {HERE}:" in detail and words in detail, detail


@pytest.mark.parametrize("switch", ["config", "environment", "errstate"])
def test_routing_off_or_linalg_errors_raised_leave_cupys_own_call(switch, monkeypatch):
    import cupyx

    config = dict(CONFIG, route_library_calls=switch != "config")
    if switch == "environment":
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    rng = np.random.default_rng(13)
    fn = SAME_ROUTINE["solve"][0]
    graphed = cg.jit(fn, out_batched=False, config=config)
    a, b = well_conditioned(rng, (16, 16), np.float64), rand(rng, (16, 3), np.float64)
    with cupyx.errstate(linalg="raise" if switch == "errstate" else "ignore"):  # "raise": a graph cannot raise
        assert np.array_equal(cupy.asnumpy(graphed(a, b)), cupy.asnumpy(fn(a, b)))
        if switch == "errstate":
            a[0] = 0
            with pytest.raises(np.linalg.LinAlgError):  # the key runs eagerly: CuPy raises, as asked
                graphed(a, b)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason.get("library_call", 0) >= 1 and not stats.routed_calls, stats.to_dict()
    assert f"(at {HERE}:" in stats.detail("library_call") and "cupygraph.linalg.solve" in stats.detail("library_call")


def test_other_threads_keep_cupys_own_solver_while_a_capture_routes():
    rng = np.random.default_rng(14)
    a, b = well_conditioned(rng, (64, 64), np.float64), rand(rng, (64, 4), np.float64)
    want = cupy.asnumpy(cupy.linalg.solve(a, b))
    stop, errors = threading.Event(), []

    def eager_solves():
        try:
            while not stop.is_set():
                if not np.array_equal(cupy.asnumpy(cupy.linalg.solve(a, b)), want):
                    errors.append("an eager solve in another thread differed during a capture")
        except BaseException as err:  # reported below
            errors.append(repr(err))

    thread = threading.Thread(target=eager_solves)
    thread.start()
    try:
        for seed in range(4):
            check_routed(SAME_ROUTINE["inv"][0], lambda rng: SAME_ROUTINE["inv"][1](rng, np.float64), bit_for_bit,
                         calls=2, seed=seed)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]


# -- CSR products: cuSPARSE SpMM ------------------------------------------------------------------------------


def csr_matrices(dtype):
    """A 16 x 12 CSR matrix, its transpose (12 x 16) and the matrix as a csr_array with int64 indices."""
    from cupyx.scipy import sparse

    m = sparse.random(16, 12, density=0.4, format="csr", dtype=dtype, random_state=3)
    wide = sparse.csr_array((m.data, m.indices.astype(cupy.int64), m.indptr.astype(cupy.int64)), shape=m.shape)
    assert wide.indices.dtype == cupy.int64  # (a csr_array keeps the index dtype it is given)
    return {"m": m, "mt": m.T.tocsr(), "int64": wide}


SPARSE = {
    "csr @ x.T": lambda d, x: (d["m"] @ x.T).T,
    "x @ csr": lambda d, x: x @ d["mt"],
    "csr.dot(x.T)": lambda d, x: d["m"].dot(x.T).T,
    "csr_matrix * x.T": lambda d, x: (d["m"] * x.T).T,
    "x * csr_matrix": lambda d, x: x * d["mt"],
    "csr @ vector": lambda d, x: d["m"] @ x[0],
    "vector @ csr": lambda d, x: x[0] @ d["mt"],
    "int64 indices": lambda d, x: (d["int64"] @ x.T).T,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SPARSE))
def test_csr_products_replay_within_the_rounding_of_a_reordered_sum(name, dtype):
    import warnings

    fn, d = SPARSE[name], csr_matrices(dtype)
    magnitudes = {k: abs(v).astype(np.float64) for k, v in d.items()}  # |A|, for the bound

    def compare(got, want, args):
        k, u = 16, eps(dtype) / 2  # every inner dimension is at most 16
        bound = 2 * (k * u / (1 - k * u)) * cupy.asnumpy(fn(magnitudes, cupy.abs(args[0]).astype(np.float64)))
        assert (np.abs(host(got)[0] - host(want)[0]) <= bound).all()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)  # the graph reads the matrices' arrays
        check_routed(lambda x: fn(d, x), lambda rng: (cupy.asarray(rng.standard_normal((16, 12))).astype(dtype),),
                     compare, library="cuSPARSE")


def test_csr_products_without_a_route_are_cupys_own():
    import warnings

    from cupyx.scipy import sparse

    csc = sparse.random(16, 12, density=0.4, format="csc", dtype=np.float64, random_state=3)
    graphed = cg.jit(lambda x: (csc @ x.T).T, out_batched=False, config=CONFIG)
    x = cupy.asarray(np.random.default_rng(15).standard_normal((16, 12)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)
        graphed(x)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls, stats.to_dict()
    assert f"(at {HERE}:" in stats.detail("library_call") and "spmm" in stats.detail("library_call")
