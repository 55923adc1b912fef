"""Real CuPy code inside graphs on the GPU (issue 20): host uploads, cuSOLVER, the corpus.

Replays are compared with eager runs on fresh random data, the family pool's free memory poisoned
first: bit for bit, except cuSOLVER results against CuPy's own ``cupy.linalg`` (another
algorithm), which are compared with ``allclose`` (rtol 1e-8 in float64).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from extras import needs_nvmath
from repo_files import load_tool

import cupygraph as cg
import cupygraph.linalg as la

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
ndi = pytest.importorskip("cupyx.scipy.ndimage")

CONFIG = {"backend": "cupy", "max_capture_size": 8}
WEIGHTS = np.linspace(-1.0, 1.0, 16).astype(np.float32)


def fresh(seed, shape=(8, 16), dtype=np.float32):
    return cupy.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def run_three(fn, f, make):
    for seed in range(3):
        args = make(seed)
        want = fn(*args)
        if seed:
            f.backend.poison_free_memory(0x7F)
        got = f(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_array_equal(cupy.asnumpy(g), cupy.asnumpy(w))


def scaled(x):
    return x * cupy.asarray(WEIGHTS)  # upload-line


asarray_by_name = cupy.asarray  # bound by name in this module, as ``from cupy import asarray`` does


def scaled_by_name(x):
    return x * asarray_by_name(WEIGHTS)  # upload-by-name


def test_a_creator_bound_by_name_is_an_upload_too():
    with cupy.cuda.Device(0):
        f = cg.jit(scaled_by_name, config={**CONFIG, "host_uploads": "fallback"})
        run_three(scaled_by_name, f, lambda s: (fresh(s),))
        assert f.registry.num_graphs() == 0 and "# upload-by-name" in f.stats().detail("host_upload")
        g = cg.jit(scaled_by_name, config={**CONFIG, "host_uploads": "constant"})
        run_three(scaled_by_name, g, lambda s: (fresh(s),))
        assert g.registry.num_graphs() == 1 and g.stats().fallbacks == 0, g.stats().to_dict()
        assert globals()["asarray_by_name"] is cupy.asarray  # the module's name is the original again


def test_fallback_refuses_an_upload_naming_the_call_and_line():
    with cupy.cuda.Device(0):
        f = cg.jit(scaled, config={**CONFIG, "host_uploads": "fallback"})
        run_three(scaled, f, lambda s: (fresh(s),))
        detail = f.stats().detail("host_upload")
        assert f.registry.num_graphs() == 0 and "cupy.asarray of <f4[16] (64 bytes)" in detail
        assert "test_real_cupy_gpu.py:" in detail and "# upload-line" in detail and 'host_uploads="auto"' in detail
        assert not hasattr(cupy.asarray, "__wrapped__") and "set" not in vars(cupy.ndarray)  # restored


@pytest.mark.parametrize("mode", ["auto", "constant"])
def test_uploads_are_baked_and_replays_are_bit_identical(mode):
    def smooth(x):
        return ndi.gaussian_filter(x, 1.5) + scaled(x)

    with cupy.cuda.Device(0):
        f = cg.jit(smooth, config={**CONFIG, "host_uploads": mode})
        run_three(smooth, f, lambda s: (fresh(s),))
        stats = f.stats()
        assert f.registry.num_graphs() == 1 and stats.fallbacks == 0
        assert any(call.startswith("cupy.asarray of <f4[16]") for call in stats.baked_uploads), stats.baked_uploads
        assert len(stats.baked_uploads) >= 2  # the filter weights too


def test_constant_uploads_are_frozen_at_capture_and_held_by_the_graph():
    with cupy.cuda.Device(0):
        f = cg.jit(scaled, config={**CONFIG, "host_uploads": "constant"})
        x = fresh(1)
        first = cupy.asnumpy(f(x))
        WEIGHTS[0] += 10.0
        try:
            cupy.get_default_pinned_memory_pool().free_all_blocks()
            np.testing.assert_array_equal(cupy.asnumpy(f(x)), first)
        finally:
            WEIGHTS[0] -= 10.0


def test_ndarray_set_is_baked_under_auto():
    def minus(x):
        scratch = cupy.empty(16, dtype=cupy.float32)
        scratch.set(WEIGHTS)
        return x - scratch

    with cupy.cuda.Device(0):
        f = cg.jit(minus, config={**CONFIG, "host_uploads": "auto"})
        run_three(minus, f, lambda s: (fresh(s),))
        assert f.registry.num_graphs() == 1


def spd(seed, n=8):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return cupy.asarray(a @ a.T + n * np.eye(n))


SOLVERS = {
    "solve": (lambda a, b: la.solve(a, b), lambda a, b: cupy.linalg.solve(a, b)),
    "inv": (lambda a, b: la.inv(a), lambda a, b: cupy.linalg.inv(a)),
    "cholesky": (lambda a, b: la.cholesky(a), lambda a, b: cupy.linalg.cholesky(a)),
    "qr": (lambda a, b: tuple(cupy.abs(m) for m in la.qr(a)),
           lambda a, b: tuple(cupy.abs(m) for m in cupy.linalg.qr(a))),
    "tensordot": (lambda a, b: la.tensordot(a, b, axes=1), lambda a, b: cupy.tensordot(a, b, axes=1)),
    "spmm": (lambda a, b: la.spmm(_csr(), a), lambda a, b: _csr() @ a),
    "spmm_dense_first": (lambda a, b: la.spmm(a, _csr_t()), lambda a, b: a @ _csr_t()),
    "einsum": (lambda a, b: la.einsum("ij,jk->ki", a, b), lambda a, b: cupy.einsum("ij,jk->ki", a, b)),
}
ON_CUBLAS = {"tensordot", "einsum"}  # the others call cuSOLVER or cuSPARSE, through nvmath-python


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_cusolver_calls_capture_and_replay_bit_identical_to_eager(name):
    if name not in ON_CUBLAS:
        needs_nvmath()
    ours, cupys = SOLVERS[name]
    with cupy.cuda.Device(0):
        f = cg.jit(ours, config=CONFIG)
        run_three(ours, f, lambda s: (spd(s), fresh(s + 50, (8, 3), np.float64)))
        assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0, f.stats().last_detail_by_reason
        a, b = spd(9), fresh(60, (8, 3), np.float64)
        for g, w in zip(_tuple(f(a, b)), _tuple(cupys(a, b))):
            np.testing.assert_allclose(cupy.asnumpy(g), cupy.asnumpy(w), rtol=1e-8, atol=1e-10)


SPECTRAL = {
    "eigh": lambda a: la.eigh(a),
    "svd": lambda a: la.svd(a, full_matrices=False),
    "svd_full": lambda a: la.svd(a),
    "svd_tall": lambda a: la.svd(a[:, :5], full_matrices=False),
    "svd_wide_full": lambda a: la.svd(a[:5]),
}


def _check_decomposition(name, a, got, tol):
    """got is a correct eigh / svd of a (vectors up to sign), values as CuPy's cupy.linalg gives them."""
    a = cupy.asnumpy(a).astype(np.float64)
    if name == "eigh":
        w, v = (cupy.asnumpy(x).astype(np.float64) for x in got)
        np.testing.assert_allclose(w, cupy.asnumpy(cupy.linalg.eigh(cupy.asarray(a))[0]), rtol=tol, atol=tol)
        np.testing.assert_allclose(a @ v, v * w, atol=tol * np.abs(w).max())
        return
    a = a[:, :5] if name == "svd_tall" else a[:5] if name == "svd_wide_full" else a
    u, s, vh = (cupy.asnumpy(x).astype(np.float64) for x in got)
    np.testing.assert_allclose(s, cupy.asnumpy(cupy.linalg.svd(cupy.asarray(a), compute_uv=False)), rtol=tol, atol=tol)
    k = len(s)
    np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], a, atol=tol * s.max())
    np.testing.assert_allclose(u.T @ u, np.eye(u.shape[1]), atol=tol * 10)
    np.testing.assert_allclose(vh @ vh.T, np.eye(vh.shape[0]), atol=tol * 10)


def run_three_close(fn, f, make, rtol):
    """run_three within rtol: cuSOLVER's XsyevBatched in float32 may round differently from run to run."""
    for seed in range(3):
        args = make(seed)
        want = fn(*args)
        if seed:
            f.backend.poison_free_memory(0x7F)
        for g, w in zip(_tuple(f(*args)), _tuple(want)):
            np.testing.assert_allclose(cupy.asnumpy(g), cupy.asnumpy(w), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(SPECTRAL))
def test_eigh_and_svd_capture_and_replay_as_eager(name, dtype):
    needs_nvmath()
    # XsyevBatched (eigh) and gesvdjBatched (svd), up to 32x32, capture; replays equal eager calls bit for
    # bit, except eigh in float32 (equal to rounding: the probe saw its eager runs differ in the last bits).
    ours = SPECTRAL[name]
    with cupy.cuda.Device(0):
        f = cg.jit(ours, config=CONFIG)
        if name == "eigh" and dtype == np.float32:
            run_three_close(ours, f, lambda s: (spd(s).astype(dtype),), 1e-5)
        else:
            run_three(ours, f, lambda s: (spd(s).astype(dtype),))
        assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0, f.stats().last_detail_by_reason
        a = spd(9).astype(dtype)
        _check_decomposition(name, a, f(a), 2e-4 if dtype == np.float32 else 1e-9)


@pytest.mark.parametrize(("name", "routine"), [("eigh", "dsyevd"), ("svd", "dgesvd")])
def test_eigh_and_svd_of_larger_matrices_fall_back_cleanly_and_the_handle_stays_usable(name, routine):
    needs_nvmath()
    # syevd/gesvd fail under capture (and broke the handle for the eager run after): refused before any call.
    ours = {"eigh": lambda a: la.eigh(a)[0], "svd": lambda a: la.svd(a)[1]}[name]
    cupys = {"eigh": lambda a: cupy.linalg.eigh(a)[0], "svd": lambda a: cupy.linalg.svd(a)[1]}[name]
    with cupy.cuda.Device(0):
        f = cg.jit(ours, config={**CONFIG, "max_capture_size": 40})
        for seed in range(3):
            a = spd(seed, n=40)
            np.testing.assert_allclose(cupy.asnumpy(f(a)), cupy.asnumpy(cupys(a)), rtol=1e-8, atol=1e-10)
        assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"library_call": 3}
        detail = f.stats().detail("library_call")
        assert f"{name} of a 40x40 matrix" in detail and routine in detail and "up to 32x32" in detail, detail
        small = cg.jit(ours, config=CONFIG)
        run_three(ours, small, lambda s: (spd(s),))
        assert small.registry.num_graphs() == 1 and small.stats().fallbacks == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_at_csr_captures_replays_bit_identical_and_matches_cupyx(dtype):
    needs_nvmath()
    import cupyx.scipy.sparse

    s = cupyx.scipy.sparse.random(64, 48, density=0.2, format="csr", dtype=dtype, random_state=5)

    def ours(x):
        return la.spmm(x, s)

    with cupy.cuda.Device(0):
        f = cg.jit(ours, config=CONFIG)
        run_three(ours, f, lambda seed: (fresh(seed, (8, 64), dtype),))
        assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0, f.stats().last_detail_by_reason
        tol = 1e-5 if dtype == np.float32 else 1e-12
        for rows in (8, 5):
            x = fresh(20 + rows, (rows, 64), dtype)
            got = f(x)
            assert got.shape == (rows, 48) and got.dtype == dtype
            np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(x @ s), rtol=tol, atol=tol)
        strided = fresh(30, (8, 128), dtype)[:, ::2]  # a non-contiguous operand is copied, not misread
        np.testing.assert_allclose(cupy.asnumpy(la.spmm(strided, s)), cupy.asnumpy(strided @ s), rtol=tol, atol=tol)


_CSR = []


def _csr():
    if not _CSR:
        import cupyx.scipy.sparse

        _CSR.append(cupyx.scipy.sparse.random(12, 8, density=0.3, format="csr", dtype=np.float64, random_state=1))
    return _CSR[0]


def _csr_t():
    if len(_CSR) < 2:
        _CSR.append(_csr().T.tocsr())  # made eagerly (cupyx's transpose runs cuSPARSE), before any capture
    return _CSR[1]


def _tuple(v):
    return v if isinstance(v, tuple) else (v,)


def test_a_failed_factorisation_is_nan_and_info_after_the_replay():
    needs_nvmath()
    def factor(a):
        return la.cholesky(a, return_info=True)

    with cupy.cuda.Device(0):
        f = cg.jit(factor, config=CONFIG)
        f(spd(1))
        bad = spd(2) - 100 * cupy.eye(8)
        factor_, info = f(bad)
        assert f.registry.num_graphs() == 1
        assert bool(cupy.isnan(factor_).all()) and int(info) > 0
        with pytest.raises(la.LinAlgFailure):
            la.check(info)
        la.check(f(spd(3))[1])


def test_a_singular_solve_is_nan_and_info_after_the_replay():
    needs_nvmath()
    def solved(a, b):
        return la.solve(a, b, return_info=True)

    with cupy.cuda.Device(0):
        f = cg.jit(solved, config=CONFIG)
        f(spd(4), fresh(5, (8, 3), np.float64))
        singular = spd(6)
        singular[:, 3] = 0  # a zero column: an exactly zero pivot, whatever the rounding
        x, info = f(singular, fresh(7, (8, 3), np.float64))
        assert f.registry.num_graphs() == 1
        assert bool(cupy.isnan(x).all()) and int(info) > 0
        with pytest.raises(la.LinAlgFailure, match="singular"):
            la.check(info)


def test_the_corpus():
    needs_nvmath()
    corpus = load_tool("corpus")
    run = corpus.run_all()
    path = os.environ.get("CUPYGRAPH_CORPUS_JSON")
    if path:
        with open(path, "w") as out:
            json.dump(run, out, indent=1)
    wrong = [c for c in run["cases"] if c["status"] == "wrong"]
    assert not wrong, wrong
    unnamed = [c["name"] for c in run["cases"] if c.get("reason") and not c.get("names_line")]
    assert not unnamed, unnamed
    assert run["captured_with_replacements"] >= 0.9 * run["total"], run["counts"]
    # Issue 29: at least 90 % captured and correct with the default config and the code unchanged.
    assert run["counts"]["captures"] >= 0.9 * run["total"], run["counts"]
