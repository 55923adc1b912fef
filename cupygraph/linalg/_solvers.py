"""``solve``, ``inv``, ``cholesky``, ``qr``, ``eigh``, ``svd`` (cuSOLVER on CuPy arrays, NumPy on host
arrays) and ``spmm`` (cuSPARSE): the public functions, their checks and the failure rule.

A graph cannot raise, so a numerical failure is reported on the device: the results are NaN and
``info`` (an int32 array, one per matrix, 0 on success) is non-zero. ``return_info=True`` adds
``info`` to the results; return it from the graphed function and call ``check(info)`` on it after
the call (that reads it on the host). Both backends follow this rule, so they give the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CupyGraphError


class LinAlgFailure(CupyGraphError, np.linalg.LinAlgError):
    """``check(info)`` found a failed factorisation (singular, not positive definite, no convergence)."""


def _on_gpu(*values: Any) -> bool:
    return any(type(v).__module__.split(".", 1)[0] == "cupy" for v in values)


def _impl(*values: Any) -> Any:
    if _on_gpu(*values):
        from . import _solver

        return _solver
    from . import _solver_host

    return _solver_host


def _check_dtype(x: Any, name: str, what: str) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype is None or getattr(x, "shape", None) is None:
        raise TypeError(f"{what}: argument {name!r} must be a CuPy or NumPy array, got {type(x).__name__}")
    if not (dtype.char in "fd" or dtype.kind in "biu"):
        raise TypeError(f"{what}: argument {name!r} is {dtype}; float32 and float64 are supported (integers become "
                        "float64): cast first")


def _check_input(a: Any, what: str, square: bool, matrix_only: bool) -> None:
    _check_dtype(a, "a", what)
    shape = a.shape
    if len(shape) < 2 or (matrix_only and len(shape) != 2):
        raise ValueError(f"{what}: argument 'a' must be {'one (M, N) matrix' if matrix_only else '(..., M, N)'}, "
                         f"got shape {tuple(shape)}")
    if square and shape[-1] != shape[-2]:
        raise ValueError(f"{what}: argument 'a' must be square (..., M, M), got shape {tuple(shape)}")


def _results(values: tuple[Any, ...], return_info: bool) -> Any:
    *results, info = values
    if return_info:
        return (*results, info)
    return results[0] if len(results) == 1 else tuple(results)


def solve(a: Any, b: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.solve(a, b)`` (b is (..., M) or (..., M, K)); LU on cuSOLVER for CuPy arrays."""
    _check_input(a, "cupygraph.linalg.solve", square=True, matrix_only=False)
    _check_dtype(b, "b", "cupygraph.linalg.solve")
    return _results(_impl(a, b).solve(a, b), return_info)


def inv(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.inv(a)``."""
    _check_input(a, "cupygraph.linalg.inv", square=True, matrix_only=False)
    return _results(_impl(a).inv(a), return_info)


def cholesky(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.cholesky(a)``: the lower factor L (a = L @ L.T); reads a's lower triangle."""
    _check_input(a, "cupygraph.linalg.cholesky", square=True, matrix_only=False)
    return _results(_impl(a).cholesky(a), return_info)


def eigh(a: Any, UPLO: str = "L", *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.eigh(a, UPLO)``: ascending eigenvalues w and eigenvectors as columns of v."""
    _check_input(a, "cupygraph.linalg.eigh", square=True, matrix_only=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"cupygraph.linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return _results(_impl(a).eigh(a, UPLO), return_info)


def qr(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.qr(a, mode="reduced")``: Q (M, K), R (K, N), K = min(M, N)."""
    _check_input(a, "cupygraph.linalg.qr", square=False, matrix_only=True)
    return _results(_impl(a).qr(a), return_info)


def svd(a: Any, full_matrices: bool = True, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.svd(a, full_matrices)``: U, S (descending), Vh."""
    _check_input(a, "cupygraph.linalg.svd", square=False, matrix_only=True)
    return _results(_impl(a).svd(a, full_matrices), return_info)


def check(*infos: Any) -> None:
    """Raise ``LinAlgFailure`` when any ``info`` array from ``return_info=True`` is non-zero.

    Reads the arrays on the host (it synchronises): call it after the graphed call, not inside it.
    """
    for k, info in enumerate(infos):
        values = np.asarray(info.get() if _on_gpu(info) else info)
        if values.size and values.any():
            failed = np.argwhere(values != 0)
            raise LinAlgFailure(
                f"cupygraph.linalg: factorisation {k} failed for {len(failed)} matrix(es), first at batch index "
                f"{tuple(int(i) for i in failed[0])} (info {int(values[tuple(failed[0])])}): a singular matrix "
                "(solve, inv), one not positive definite (cholesky) or no convergence (eigh, svd); its results are NaN")


def spmm(a: Any, b: Any) -> Any:
    """``a @ b`` for a CSR matrix a (M, K) and a dense 2-D b (K, N).

    On the GPU (a ``cupyx.scipy.sparse.csr_matrix`` and a CuPy array) one cuSPARSE SpMM that
    captures; on the host (a ``scipy.sparse`` matrix and a NumPy array) SciPy's product.
    """
    if _on_gpu(b):
        from ._spmm import spmm as on_device

        return on_device(a, b)
    from ..backends.host_guard import capture_run_active, guarded

    plain = b.view(np.ndarray) if isinstance(b, np.ndarray) else b
    result = np.asarray(a @ plain)
    return guarded(result) if capture_run_active() else result
