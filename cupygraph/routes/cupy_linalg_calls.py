"""What a routed ``cupy.linalg`` call or CSR product runs (``cupy_linalg.py`` routes them here).

Each function takes the call's arrays and options (``linalg/routable.RoutedCall``; the arguments were
checked there) and returns what CuPy returns (its tuples, dtypes and shapes), computed with
cupygraph.linalg's capture-safe routines. Where CuPy composes a function from a factorisation, the
composition is CuPy's, on cupygraph's factorisation: ``norm`` (ord 2, -2,
'nuc') from the singular values; ``lstsq`` and ``pinv`` from the SVD as CuPy writes them, with
``cupy.where`` for CuPy's boolean-mask assignments (those read the mask's count on the host) and
``cupygraph.matmul`` for its products (the GEMMs capture without being routed again, so the routed
call is noted once, as the host notes it). ``docs/ROUTING.md`` says which results are CuPy's bit for
bit (the same cuSOLVER routine with the same arguments) and by how much the others may differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import cupy
import numpy

from ..linalg import cholesky, eigh, matmul, spmm, svd
from ..linalg.routable import RoutedCall

__all__ = ["run"]


def _cholesky(a: Any, upper: bool) -> Any:
    return cholesky(a)  # (a stack of matrices: CuPy's potrfBatched is not routed, cupygraph's potrf per matrix is)


def _eigh(a: Any, UPLO: str) -> Any:
    w, v = eigh(a, UPLO)
    return w, v


def _eigvalsh(a: Any, UPLO: str) -> Any:
    return eigh(a, UPLO)[0]


def _svd(a: Any, full_matrices: Any, compute_uv: Any, hermitian: bool) -> Any:
    if not compute_uv:
        return svd(a, full_matrices=False)[1]
    u, s, vh = svd(a, full_matrices=bool(full_matrices))
    return u, s, vh


def _norm(x: Any, ord: Any, axis: Any, keepdims: bool) -> Any:
    rows_last = axis is not None and axis[0] % 2 == 1  # CuPy moves (row, column) to the end: x.T for (1, 0)
    s = svd(x.T if rows_last else x, full_matrices=False)[1]
    value = s.sum() if ord == "nuc" else (s[0] if ord == 2 else s[-1]).copy()  # s descends
    return value.reshape(1, 1) if keepdims else value


def _lstsq(a: Any, b: Any, rcond: Optional[float]) -> Any:
    """CuPy's ``lstsq`` (here with rows <= columns, so the residuals are empty)."""
    m, n = a.shape
    u, s, vh = svd(a, full_matrices=False)
    eps = float(numpy.finfo(s.dtype).eps)
    if rcond is None:
        rcond = eps * max(m, n)
    elif rcond <= 0 or rcond >= 1:
        rcond = eps
    small = s <= rcond * s.max()
    inverse = cupy.where(small, s.dtype.type(0), 1 / s)
    rank = cupy.full((), s.size, dtype=numpy.int32)
    rank -= small.sum(dtype=numpy.int32)
    z = (matmul(b.T, u) * inverse).T
    return matmul(vh.T, z), cupy.empty((0,), dtype=s.dtype), rank, s


def _pinv(a: Any, rcond: float, hermitian: bool) -> Any:
    """CuPy's ``pinv``: V diag(1/s) U^T, dropping the singular values at most rcond times the largest."""
    u, s, vt = svd(a, full_matrices=False)
    inverse = cupy.where(s <= rcond * s.max(), s.dtype.type(0), cupy.reciprocal(s))
    return matmul(vt.T, inverse[:, None] * u.T)


def _spmm(matrix: Any, other: Any, dense_first: bool) -> Any:
    if other.ndim == 1:  # a vector: one column (or row) of dense operand
        return spmm(other[None, :], matrix)[0] if dense_first else spmm(matrix, other[:, None])[:, 0]
    return spmm(other, matrix) if dense_first else spmm(matrix, other)


_RUN: dict[str, Callable[..., Any]] = {
    # (``solve``, ``inv``, ``det``, ``slogdet`` and one matrix's ``qr`` and ``cholesky`` never come here: they
    # are CuPy's own code, its library calls routed: ``routable.RoutedCall.own_code``, ``cupy_libraries.py``)
    "cholesky": _cholesky, "eigh": _eigh, "eigvalsh": _eigvalsh, "svd": _svd, "norm": _norm, "lstsq": _lstsq,
    "pinv": _pinv, "spmm": _spmm,
}


def run(call: RoutedCall) -> Any:
    """The routed call's result, as CuPy would return it."""
    return _RUN[call.name](*call.arrays, **call.options)
