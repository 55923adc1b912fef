"""Every fallback reason names the user's line and, where one exists, what captures instead (issue 20).

The GPU half (CuPy's refusals) is checked here on synthetic tracebacks: library functions compiled
under CuPy-like file and module names, as CuPy's Cython and Python frames look.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
import cupygraph.linalg
from cupygraph.frames import call_site_in_traceback
from cupygraph.hints import LINALG_REPLACEMENTS, replacement

HOST = dict(backend="host", max_capture_size=16)


def library_function(name: str, filename: str, module: str, message: str = "stream is capturing"):
    """A function called ``name`` in code compiled as ``filename`` in module ``module`` that raises."""
    namespace: dict = {"__name__": module}
    exec(compile(f"def {name}(*args):\n    raise RuntimeError({message!r})\n", filename, "exec"), namespace)
    return namespace[name]


def raised_by(call):
    try:
        call()
    except RuntimeError as err:
        return err
    raise AssertionError("no error")


@pytest.mark.parametrize(("filename", "module"), [
    ("cupy/linalg/_solve.py", "cupy.linalg._solve"),
    ("/opt/venv/lib/python3.12/site-packages/cupy/linalg/_solve.py", "cupy.linalg._solve"),
])
def test_the_called_library_function_is_the_outermost_library_frame_below_the_users_line(filename, module):
    solve = library_function("solve", filename, module)
    inner = library_function("_lock", "fastrlock/rlock.pyx", "fastrlock.rlock")
    cupy_inner = library_function("_solve_impl", "cupy/_core/core.pyx", "cupy._core.core")
    err = raised_by(lambda: solve(1))
    site = call_site_in_traceback(err)
    assert site is not None and site.called == "cupy.linalg._solve.solve"
    assert "solve(1)" in site.code
    assert "fastrlock" in cg.frames.LIBRARY_PACKAGES
    assert call_site_in_traceback(raised_by(lambda: cupy_inner(2))).called == "cupy._core.core._solve_impl"
    assert call_site_in_traceback(raised_by(lambda: inner(3))).called == "fastrlock.rlock._lock"


def test_a_call_a_router_leaves_as_it_is_still_names_the_users_line_and_the_library_function():
    import types

    from cupygraph.backends.guards.uploads import UNTOUCHED, Interception
    from cupygraph.frames import called_from_user

    solve = library_function("solve", "cupy/linalg/_solve.py", "cupy.linalg._solve")
    callers = []

    def route(label, original, args, kwargs):  # a router with no route for these arguments
        callers.append(called_from_user(2))  # (called_from_user <- route <- the interception's wrapper <- caller)
        return UNTOUCHED

    owner = types.SimpleNamespace(solve=solve)
    with Interception(lambda: [(owner, "solve", "solve")]).active(route):
        err = raised_by(lambda: owner.solve(1))  # the user's line -> the wrapper -> solve
        callers.append(called_from_user(0))  # (this test's own frame: the user's)
    site = call_site_in_traceback(err)
    assert site is not None and site.called == "cupy.linalg._solve.solve", site
    assert "owner.solve(1)" in site.code and callers == [True, True]
    assert "use `cupygraph.linalg.solve`" in replacement("library_call", site.called, site.code)
    assert owner.solve is solve


@pytest.mark.parametrize(("reason", "called", "code", "expected"), [
    ("device_to_host_read", "cupy._core.core._ndarray_base.__setitem__", "y[y < 0] = 0",
     "y[...] = cupy.where(y < 0, 0, y)"),
    ("data_dependent_shape", "", "    x[x > 5] = x.mean()  # clip", "x[...] = np.where(x > 5, x.mean(), x)"),
    ("library_call", "cupy.linalg._solve.solve", "z = cupy.linalg.solve(a, b)", "`cupygraph.linalg.solve`"),
    ("library_call", "cupy.linalg._decomposition.cholesky", "l = cupy.linalg.cholesky(a)",
     "`cupygraph.linalg.cholesky`"),
    ("library_call", "cupy.linalg._norms.slogdet", "s, l = cupy.linalg.slogdet(a)", "`cupygraph.linalg.slogdet`"),
    ("library_call", "cupy.linalg._product.tensordot", "t = cupy.tensordot(a, b, 1)", "cupygraph.linalg.tensordot"),
    ("library_call", "cupy._core.core._ndarray_base.__matmul__", "y = x @ w", "`cupygraph.matmul`"),
    ("host_upload", "cupy._creation.from_data.asarray", "w = cupy.asarray(weights)", 'host_uploads="auto"'),
    ("device_to_host_read", "cupy._core.core._ndarray_base.__bool__", "if x.max() > 0:", "cupygraph.cond"),
    ("device_to_host_read", "", "m = X[labels == i].mean()", "where(mask, x, 0).sum() / mask.sum()"),
    ("data_dependent_shape", "cupy._statistics.histogram.bincount", "c = cupy.bincount(x)", "cupyx.scatter_add"),
])
def test_a_reason_names_the_replacement(reason, called, code, expected):
    xp = "np" if "np." in expected else "cupy"
    hint = replacement(reason, called, code, xp)
    assert hint.startswith("; ") and expected in hint, hint


def test_no_hint_where_nothing_captures_instead():
    assert replacement("out_of_memory", "", "y = x * 2") == ""
    assert replacement("capture_failed", "cupy._core.core.foo", "y = x.foo()") == ""


def test_every_linalg_replacement_named_exists():
    missing = [name for name in LINALG_REPLACEMENTS if not callable(getattr(cupygraph.linalg, name, None))]
    assert not missing, missing


# -- the host backend's refusals carry the same hints ------------------------------------------------------


def test_host_linalg_refusal_names_the_users_line_and_cupygraph_linalg():
    def fn(a):
        return np.linalg.inv(a + 4 * np.eye(a.shape[1]))  # the user's line

    f = cg.jit(fn, config=dict(HOST, route_library_calls=False))  # (routed, it captures: docs/ROUTING.md)
    x = np.random.default_rng(0).standard_normal((4, 4))
    np.testing.assert_allclose(f(x), fn(x))
    detail = f.stats().detail("library_call")
    assert "(at test_hints.py:" in detail and "# the user's line" in detail
    assert "use `cupygraph.linalg.inv`" in detail


def test_host_mask_assignment_refusal_suggests_where_with_the_users_names():
    def fn(y):
        y = y * 1
        y[y < 0] = 0
        return y

    f = cg.jit(fn, config={**HOST, "route_library_calls": False})  # routed (rewritten into copyto) otherwise
    x = np.random.default_rng(1).standard_normal((4, 3))
    np.testing.assert_array_equal(f(x), fn(x))
    detail = f.stats().detail("data_dependent_shape")
    assert "y[y < 0] = 0" in detail and "y[...] = np.where(y < 0, 0, y)" in detail


def test_csr_products_name_cupygraph_linalg_spmm():
    hint = replacement("library_call", "cupyx.scipy.sparse._base.spmatrix.__matmul__", "y = a @ x")
    assert "`cupygraph.linalg.spmm(csr, dense)`" in hint
    hint = replacement("library_call", "cupyx.scipy.sparse._base.spmatrix.__rmatmul__", "y = x @ a")
    assert "`cupygraph.linalg.spmm(dense, csr)`" in hint


@pytest.mark.parametrize(("name", "called"), [("eigh", "cupy.linalg._eigenvalue.eigh"),
                                             ("svd", "cupy.linalg._decomposition.svd")])
def test_eigh_and_svd_hints_name_the_size_that_captures(name, called):
    from cupygraph.linalg._spectral_routines import CAPTURE_MAX

    hint = replacement("library_call", called, f"r = cupy.linalg.{name}(a)")
    assert f"`cupygraph.linalg.{name}`" in hint and f"up to {CAPTURE_MAX}x{CAPTURE_MAX}" in hint


@pytest.mark.parametrize(("called", "expected"), [
    ("cupyx.scipy.special._logsumexp.logsumexp", "cupy.log(cupy.exp(x - m)"),
    ("cupyx.scipy.signal._savitzky_golay.savgol_filter", "savgol_coeffs(window, order)` once"),
])
def test_cupyx_functions_that_read_the_host_name_a_rewrite(called, expected):
    assert expected in replacement("device_to_host_read", called, "y = f(x)")


@pytest.mark.parametrize(("reason", "called", "expected"), [
    ("library_call", "cupy.linalg._solve.lstsq", "`cupygraph.linalg.solve(a, b)`"),
    ("library_call", "cupy._statistics.correlation.corrcoef", "cupygraph.matmul(c, c.T)"),
    ("device_to_host_read", "cupy._sorting.search.nonzero", "shape depends on the data"),
    ("device_to_host_read", "cupy._manipulation.add_remove.unique", "outside the graphed function"),
])
def test_library_functions_without_a_twin_name_a_rewrite_or_say_why_not(reason, called, expected):
    assert expected in replacement(reason, called, "y = f(x)")


def test_a_failing_cupygraph_function_is_not_suggested_as_its_own_replacement():
    assert "cupygraph.linalg.cholesky`" not in replacement("library_call", "cupygraph.linalg._public_solvers.cholesky",
                                                            "l = cupygraph.linalg.cholesky(a)")
