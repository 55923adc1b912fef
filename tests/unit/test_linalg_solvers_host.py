"""cupygraph.linalg's cuSOLVER functions on the host backend: NumPy's results, failures as NaN + info.

The GPU half (``tests/gpu/test_solvers_gpu.py``) compares graph replays with eager calls.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
import cupygraph.linalg as la

RNG = np.random.default_rng(7)


def spd(n, dtype=np.float64, batch=()):
    a = RNG.standard_normal((*batch, n, n)).astype(dtype)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_results_are_numpys(dtype):
    a = spd(5, dtype)
    b = RNG.standard_normal((5, 2)).astype(dtype)
    np.testing.assert_array_equal(la.solve(a, b), np.linalg.solve(a, b))
    np.testing.assert_array_equal(la.solve(a, b[:, 0]), np.linalg.solve(a, b[:, 0]))
    np.testing.assert_array_equal(la.inv(a), np.linalg.inv(a))
    np.testing.assert_array_equal(la.cholesky(a), np.linalg.cholesky(a))
    for mine, numpys in zip(la.eigh(a), np.linalg.eigh(a)):
        np.testing.assert_array_equal(mine, numpys)
    rect = RNG.standard_normal((6, 4)).astype(dtype)
    for mine, numpys in zip(la.qr(rect), np.linalg.qr(rect)):
        np.testing.assert_array_equal(mine, numpys)
    for mine, numpys in zip(la.svd(rect, full_matrices=False), np.linalg.svd(rect, full_matrices=False)):
        np.testing.assert_array_equal(mine, numpys)
    assert la.solve(a, b).dtype == dtype


def test_batched_solve_and_cholesky():
    a = spd(4, batch=(3,))
    b = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(la.solve(a, b), np.linalg.solve(a, b[..., None])[..., 0])
    np.testing.assert_array_equal(la.cholesky(a), np.linalg.cholesky(a))


def test_a_failure_is_nan_and_info_and_check_raises():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])  # symmetric, not positive definite
    good = spd(2)
    factor, info = la.cholesky(np.stack([good, bad]), return_info=True)
    assert np.isnan(factor[1]).all() and not np.isnan(factor[0]).any()
    assert info.tolist() == [0, 1]
    with pytest.raises(la.LinAlgFailure, match="batch index \\(1,\\)") as raised:
        la.check(info)
    assert isinstance(raised.value, np.linalg.LinAlgError)
    x, info = la.solve(np.zeros((3, 3)), np.ones(3), return_info=True)
    assert np.isnan(x).all() and int(info) == 1
    la.check(la.solve(good, np.ones(2), return_info=True)[1])  # success: no error


@pytest.mark.parametrize(("call", "match"), [
    (lambda: la.solve(np.ones((2, 3)), np.ones(2)), "square"),
    (lambda: la.cholesky(np.ones((2, 2), np.complex128)), "complex128"),
    (lambda: la.eigh(np.ones((2, 2, 2))), "one \\(M, N\\) matrix"),
    (lambda: la.qr([[1.0]]), "must be a CuPy or NumPy array"),
    (lambda: la.eigh(np.eye(2), UPLO="X"), "UPLO"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_tensordot_is_numpys():
    a, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((5, 4, 2))
    np.testing.assert_allclose(la.tensordot(a, b, axes=([1, 2], [1, 0])), np.tensordot(a, b, axes=([1, 2], [1, 0])))
    np.testing.assert_allclose(la.tensordot(a, b.transpose(1, 0, 2), axes=2),
                               np.tensordot(a, b.transpose(1, 0, 2), axes=2))
    np.testing.assert_allclose(la.tensordot(a, b, axes=0), np.tensordot(a, b, axes=0))
    with pytest.raises(ValueError, match="shape mismatch"):
        la.tensordot(a, b, axes=([0], [0]))


def test_they_capture_under_jit_where_np_linalg_falls_back():
    def with_numpy(a, b):
        return np.linalg.solve(a + 8 * np.eye(a.shape[-1]), b)

    def with_cupygraph(a, b):
        x, info = la.solve(a + 8 * np.eye(a.shape[-1]), b, return_info=True)
        return x, la.cholesky(cg.matmul(a, np.swapaxes(a, -1, -2)) + np.eye(a.shape[-1])), info

    config = dict(backend="host", max_capture_size=8)
    unrouted = dict(config, route_library_calls=False)  # (issue 29 routes np.linalg.solve: docs/ROUTING.md)
    f_np, f_cg = cg.jit(with_numpy, config=unrouted), cg.jit(with_cupygraph, config=config)
    for seed in range(3):
        a = np.random.default_rng(seed).standard_normal((4, 4))
        b = np.random.default_rng(seed + 10).standard_normal((4, 2))
        np.testing.assert_array_equal(f_np(a, b), with_numpy(a, b))
        got, want = f_cg(a, b), with_cupygraph(a, b)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        la.check(got[2])
    assert f_np.stats().fallbacks_by_reason == {"library_call": 3}
    assert "use `cupygraph.linalg.solve`" in f_np.stats().detail("library_call")
    assert f_cg.registry.num_graphs() == 1 and f_cg.stats().fallbacks == 0


def test_spmm_is_the_matrix_product_in_either_order_and_captures_on_the_host():
    sparse = pytest.importorskip("scipy.sparse")
    s = sparse.random(6, 4, density=0.5, format="csr", random_state=1)

    def fn(x):
        return la.spmm(s, x[:, :4].T) * 2, la.spmm(x, s)

    f = cg.jit(fn, config=dict(backend="host", max_capture_size=8))
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((8, 6))
        if seed == 0:  # the graph reads the matrix by address, as on the GPU: said once
            with pytest.warns(cg.ForeignMemoryWarning, match="closure variable 's'"):
                got = f(x)
        else:
            got = f(x)
        np.testing.assert_array_equal(got[0], (s @ x[:, :4].T) * 2)
        np.testing.assert_array_equal(got[1], la.spmm(x, s))
        np.testing.assert_allclose(got[1], x @ s, rtol=1e-12, atol=1e-12)
        assert got[1].dtype == np.float64 and got[1].flags.c_contiguous
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0


def test_spmm_result_dtype_is_the_operands_result_type():
    sparse = pytest.importorskip("scipy.sparse")
    s = sparse.random(5, 3, density=0.6, format="csr", random_state=2, dtype=np.float32)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    assert la.spmm(x, s).dtype == np.float32 and la.spmm(s.T.tocsr(), x.T).dtype == np.float32
    np.testing.assert_allclose(la.spmm(x.astype(np.int64), s), x @ s.toarray(), rtol=1e-6)
    assert la.spmm(x.astype(np.int64), s).dtype == np.float64


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda sp: la.spmm(np.ones((2, 5)), np.ones((5, 3))), TypeError, "one operand must be a CSR matrix"),
    (lambda sp: la.spmm(sp.random(5, 3, format="csc"), np.ones((3, 2))), TypeError, r"a.tocsr\(\)"),
    (lambda sp: la.spmm(np.ones((2, 5)), sp.random(5, 3, format="coo")), TypeError, r"b.tocsr\(\)"),
    (lambda sp: la.spmm(np.ones((2, 4)), sp.random(5, 3, format="csr")), ValueError, "5 columns"),
    (lambda sp: la.spmm(sp.random(5, 3, format="csr"), np.ones(3)), ValueError, "3 rows"),
    (lambda sp: la.spmm(sp.random(5, 3, format="csr"), sp.random(3, 2, format="csr")), TypeError, "two sparse"),
    (lambda sp: la.spmm(np.ones((2, 5), np.complex64), sp.random(5, 3, format="csr")), TypeError, "complex"),
])
def test_spmm_refuses_what_the_gpu_refuses_by_name(call, error, match):
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(error, match=match):
        call(sparse)


def _ascending_and_numpys(a, w, v):
    want_w, want_v = np.linalg.eigh(a)
    np.testing.assert_array_equal(w, want_w)
    np.testing.assert_array_equal(v, want_v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_and_svd_up_to_32_by_32_capture(dtype):
    def fn(a):
        w, v = la.eigh(cg.matmul(a, a.T) + 32 * np.eye(32, dtype=a.dtype))
        u, s, vh = la.svd(a[:, :5], full_matrices=False)
        return w, v, u, s, vh

    f = cg.jit(fn, config=dict(backend="host", max_capture_size=32))
    for seed in range(3):
        a = np.random.default_rng(seed).standard_normal((32, 7)).astype(dtype)
        got = f(a)
        want = fn(a)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == dtype
        _ascending_and_numpys(cg.matmul(a, a.T) + 32 * np.eye(32, dtype=dtype), got[0], got[1])
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0


@pytest.mark.parametrize(("name", "fn", "routine", "dims"), [
    ("eigh", lambda a: la.eigh(cg.matmul(a, a.T))[0], "dsyevd", "40x40"),
    ("svd", lambda a: la.svd(a)[1], "dgesvd", "40x6"),
])
def test_eigh_and_svd_of_larger_matrices_run_eagerly_naming_the_size(name, fn, routine, dims):
    f = cg.jit(fn, config=dict(backend="host", max_capture_size=40))
    for seed in range(2):
        a = np.random.default_rng(seed).standard_normal((40, 6))  # 40 rows: a capture size, no padding
        np.testing.assert_array_equal(f(a), fn(a))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"library_call": 2}
    detail = f.stats().detail("library_call")
    assert f"cupygraph.linalg.{name} of a {dims} matrix" in detail and routine in detail and "up to 32x32" in detail


def test_a_nan_eigen_or_singular_value_is_a_failure_in_info():
    a = spd(3)
    a[2, 0] = np.nan  # the lower triangle, which eigh reads
    w, v, info = la.eigh(a, return_info=True)
    assert int(info) == 1 and np.isnan(w).all() and np.isnan(v).all()
    u, s, vh, info = la.svd(a, return_info=True)
    assert int(info) == 1 and np.isnan(s).all() and np.isnan(u).all() and np.isnan(vh).all()
    with pytest.raises(la.LinAlgFailure):
        la.check(info)
    a[2, 0] = a[0, 2]
    la.check(la.eigh(a, return_info=True)[2], la.svd(a, return_info=True)[3])


@pytest.mark.parametrize("subscripts", ["ij,jk->ik", "bij,bkj->bik", "ij,kj->ki", "bij,bjk->bki", "ijk,k->ij",
                                        "ij,kl->ijkl", "ij,jk->i", "bi,bi->b"])
def test_einsum_is_numpys_for_two_operands(subscripts):
    shapes = {"i": 3, "j": 4, "k": 5, "l": 2, "b": 6}
    left, right = subscripts.split("->")[0].split(",")
    a = RNG.standard_normal([shapes[c] for c in left])
    b = RNG.standard_normal([shapes[c] for c in right])
    np.testing.assert_allclose(la.einsum(subscripts, a, b), np.einsum(subscripts, a, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("subscripts", "match"), [
    ("ii,ij->j", "one distinct letter per axis"), ("ij,jk", "explicit output"), ("ij,jk->iz", "output subscripts"),
])
def test_einsum_refuses_what_it_cannot_do_by_name(subscripts, match):
    with pytest.raises(ValueError, match=match):
        la.einsum(subscripts, np.ones((3, 3)), np.ones((3, 4)))


def test_solve_refuses_b_of_another_shape_on_the_host_as_on_the_gpu():

    a = np.eye(3)[None].repeat(2, axis=0) * 2.0
    with pytest.raises(ValueError, match=r"linalg\.solve: b of shape \(3, 3\) does not match a of shape \(2, 3, 3\)"):
        la.solve(a, np.ones((3, 3)))  # NumPy would broadcast and leave rows unwritten
    with pytest.raises(ValueError, match="b of shape"):
        la.solve(a[0], np.ones(4))


def test_tensordot_refuses_axes_out_of_range_or_repeated_naming_them():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(ValueError, match=r"name an axis a does not have \(a has 2 dimensions\)"):
        la.tensordot(a, b, axes=([3], [0]))  # NumPy raises; a wrap-around would contract axis 1
    with pytest.raises(ValueError, match="repeat an axis of a"):
        la.tensordot(np.ones((3, 3)), np.ones((3, 3, 3)), axes=([1, 1], [0, 1]))
