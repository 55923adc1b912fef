"""The public ``solve``, ``inv``, ``cholesky``, ``qr``, ``eigh``, ``svd``, ``slogdet``, ``det`` and ``spmm``
(CSR @ dense and dense @ CSR): the checks both backends share, the failure rule, and which module runs each call.

CuPy arrays go to the GPU modules: ``_cusolver`` (LU, Cholesky, QR, determinants), ``_spectral`` (eigh, svd; its
routine per size in ``_spectral_routines``), ``_spmm`` (cuSPARSE). NumPy arrays go to the host
reference, ``_solvers_host`` (and SciPy for ``spmm``).

A graph cannot raise, so a numerical failure is reported on the device: the results are NaN and
``info`` (an int32 array, one per matrix, 0 on success) is non-zero. ``return_info=True`` adds
``info`` to the results; return it from the graphed function and call ``check(info)`` on it after
the call (that reads it on the host). Both backends follow this rule, so they give the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.base import on_gpu as _on_gpu
from ..errors import CupyGraphError


class LinAlgFailure(CupyGraphError, np.linalg.LinAlgError):
    """``check(info)`` found a failed factorisation (singular, not positive definite, no convergence)."""


def _runner(*values: Any, spectral: bool = False) -> Any:
    """The module that runs the routine: for CuPy arrays ``_cusolver`` (``_spectral`` for eigh and
    svd), imported on first use; for NumPy arrays the host reference. Mixing them is refused."""
    sides = {_on_gpu(v) for v in values}
    if len(sides) > 1:
        raise TypeError("cupygraph.linalg: the arguments mix CuPy and NumPy arrays; pass all of one kind "
                        "(cupy.asarray(...) or cupy.asnumpy(...) first)")
    if True not in sides:
        from . import _solvers_host

        return _solvers_host
    if spectral:
        from . import _spectral

        return _spectral
    from . import _cusolver

    return _cusolver


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
    what = "cupygraph.linalg.solve"
    _check_input(a, what, square=True, matrix_only=False)
    _check_dtype(b, "b", what)
    vector = b.ndim == a.ndim - 1
    if (b.shape[:-1] if vector else b.shape[:-2]) != a.shape[:-2] or b.shape[-1 if vector else -2] != a.shape[-1]:
        raise ValueError(f"{what}: b of shape {b.shape} does not match a of shape {a.shape} (NumPy's rule: b is "
                         "(..., M) or (..., M, K) with the batch axes of a)")
    return _results(_runner(a, b).solve(a, b), return_info)


def inv(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.inv(a)``."""
    _check_input(a, "cupygraph.linalg.inv", square=True, matrix_only=False)
    return _results(_runner(a).inv(a), return_info)


def cholesky(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.cholesky(a)``: the lower factor L (a = L @ L.T); reads a's lower triangle."""
    _check_input(a, "cupygraph.linalg.cholesky", square=True, matrix_only=False)
    return _results(_runner(a).cholesky(a), return_info)


def eigh(a: Any, UPLO: str = "L", *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.eigh(a, UPLO)``: ascending eigenvalues w and eigenvectors as columns of v.

    float32/float64, one (M, M) matrix, reading the UPLO triangle. Up to 32 x 32 cuSOLVER's
    ``XsyevBatched`` on one matrix, which captures into a graph; larger matrices run ``syevd``,
    which fails under stream capture, so their key runs eagerly. Eigenvectors agree with NumPy's
    up to sign; in float32 the last bits may vary from run to run (XsyevBatched).
    """
    _check_input(a, "cupygraph.linalg.eigh", square=True, matrix_only=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"cupygraph.linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return _results(_runner(a, spectral=True).eigh(a, UPLO), return_info)


def qr(a: Any, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.qr(a, mode="reduced")``: Q (M, K), R (K, N), K = min(M, N)."""
    _check_input(a, "cupygraph.linalg.qr", square=False, matrix_only=True)
    return _results(_runner(a).qr(a), return_info)


def svd(a: Any, full_matrices: bool = True, *, return_info: bool = False) -> Any:
    """NumPy's ``linalg.svd(a, full_matrices)``: U, S (descending), Vh.

    float32/float64, one (M, N) matrix, ``full_matrices`` True or False. Up to 32 x 32 cuSOLVER's
    batched Jacobi routine (``gesvdjBatched``), which captures into a graph; larger matrices run
    ``gesvd``, which fails under stream capture, so their key runs eagerly. Singular vectors agree
    with NumPy's up to sign.
    """
    _check_input(a, "cupygraph.linalg.svd", square=False, matrix_only=True)
    return _results(_runner(a, spectral=True).svd(a, full_matrices), return_info)


def slogdet(a: Any) -> Any:
    """NumPy's ``linalg.slogdet(a)``: ``(sign, logabsdet)`` per matrix, from an LU factorisation (cuSOLVER's
    getrf, on CuPy arrays as ``cupy.linalg.slogdet`` computes it). An exactly singular matrix gives
    ``(0, -inf)``, as in NumPy: a result, not a failure (no ``info``)."""
    _check_input(a, "cupygraph.linalg.slogdet", square=True, matrix_only=False)
    return _runner(a).slogdet(a)


def det(a: Any) -> Any:
    """NumPy's ``linalg.det(a)``, as ``sign * exp(logabsdet)`` of ``slogdet`` (CuPy's formula)."""
    _check_input(a, "cupygraph.linalg.det", square=True, matrix_only=False)
    return _runner(a).det(a)


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
                "(solve, inv), one not positive definite (cholesky) or no convergence or a NaN value (eigh, svd); its "
                "results are NaN")


_INT32_MAX = 2**31 - 1


def _is_sparse(x: Any) -> bool:
    """A SciPy or cupyx.scipy.sparse matrix (looked up by its attributes: SciPy is never imported here)."""
    return hasattr(x, "format") and hasattr(x, "nnz") and hasattr(x, "shape")


def _check_spmm(sparse: Any, dense: Any, dense_first: bool) -> Any:
    """The checks both backends make; returns the result dtype."""
    what = "cupygraph.linalg.spmm"
    sparse_name, dense_name = ("b", "a") if dense_first else ("a", "b")
    if _is_sparse(dense):
        raise TypeError(f"{what}: one operand must be dense, got two sparse matrices; convert {dense_name!r} with "
                        ".toarray()")
    if sparse.format != "csr":
        raise TypeError(f"{what}: argument {sparse_name!r} must be a CSR matrix, got {sparse.format.upper()} "
                        f"({type(sparse).__name__}); convert with {sparse_name}.tocsr()")
    shape = getattr(dense, "shape", None)
    rows, cols = sparse.shape
    if shape is None or len(shape) != 2 or shape[1 if dense_first else 0] != (rows if dense_first else cols):
        need = f"a 2-D array of {rows} columns" if dense_first else f"a 2-D array of {cols} rows"
        raise ValueError(f"{what}: argument {dense_name!r} must be {need} ({sparse_name} is {rows}x{cols}), got "
                         f"{tuple(shape) if shape is not None else type(dense).__name__}")
    if max(rows, cols, sparse.nnz) > _INT32_MAX:  # cuSPARSE is given 32-bit indices (an int64 matrix is cast)
        raise ValueError(f"{what}: argument {sparse_name!r} ({rows}x{cols}, {sparse.nnz} stored values) is over "
                         f"cuSPARSE's 32-bit index limit ({_INT32_MAX}); split the product")
    dtype = np.result_type(sparse.dtype, dense.dtype)
    if dtype.char not in "fd":
        raise TypeError(f"{what}: float32 and float64 are supported, got {dtype} (from {sparse.dtype} and "
                        f"{dense.dtype}); cast first")
    return dtype


def spmm(a: Any, b: Any) -> Any:
    """``a @ b`` where one operand is a CSR matrix and the other a dense 2-D array.

    ``spmm(csr, dense)``: a (M, K) CSR, b (K, N) dense; ``spmm(dense, csr)``: a (M, K) dense, b
    (K, N) CSR. The result is a dense C-ordered (M, N) array of the operands' result dtype (float32
    or float64). On the GPU (a ``cupyx.scipy.sparse.csr_matrix`` and a CuPy array) it is cuSPARSE's
    SpMM, which captures into a graph; on the host (``scipy.sparse`` and NumPy) SciPy's product.
    """
    if not _is_sparse(a) and not _is_sparse(b):
        raise TypeError("cupygraph.linalg.spmm: one operand must be a CSR matrix (cupyx.scipy.sparse.csr_matrix "
                        f"on the GPU, scipy.sparse on the host), got {type(a).__name__} and {type(b).__name__}; for "
                        "two dense arrays use cupygraph.matmul")
    dense_first = not _is_sparse(a)
    sparse, dense = (b, a) if dense_first else (a, b)
    dtype = _check_spmm(sparse, dense, dense_first)
    if _on_gpu(dense) != (type(sparse).__module__.split(".", 1)[0] == "cupyx"):
        raise TypeError(f"cupygraph.linalg.spmm: both operands must live on one side, a cupyx.scipy.sparse matrix "
                        f"with a CuPy array (GPU) or a scipy.sparse matrix with a NumPy array (host), got "
                        f"{type(sparse).__module__}.{type(sparse).__name__} and {type(dense).__name__}")
    if _on_gpu(dense):
        from . import _spmm

        return _spmm.dense_csr(dense, sparse, dtype) if dense_first else _spmm.csr_dense(sparse, dense, dtype)
    from ..backends.guards.host_capturable import handed_back, plain_array

    plain = np.asarray(plain_array(dense))
    result = np.asarray(plain @ sparse) if dense_first else np.asarray(sparse @ plain)
    return handed_back(np.ascontiguousarray(result, dtype=dtype))
