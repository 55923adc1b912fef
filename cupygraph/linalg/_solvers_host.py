"""The NumPy reference of ``cupygraph.linalg``'s cuSOLVER functions: same results, same failure rule.

NumPy raises ``LinAlgError`` where cuSOLVER reports a failure in ``info``; the GPU path cannot
raise inside a graph, so it fills the results with NaN and sets ``info``. The reference does the
same, so a function gives the same values on both backends (and ``check(info)`` raises on both).
Under a host capture run the results are handed back guarded, as ``cupygraph.matmul``'s are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends.guards.host_capturable import handed_back, plain_array
from ..backends.guards.host_refusal import capture_run_active, refuse
from ..reasons import FallbackReason
from . import _spectral_routines


def _float(x: Any) -> np.ndarray:
    plain: np.ndarray = plain_array(x)
    return plain.astype(np.float64) if plain.dtype.kind in "biu" else plain


def _each(a: np.ndarray, fn: Callable[[np.ndarray], tuple[Any, ...]], count: int) -> tuple[Any, ...]:
    """``fn`` on every matrix of a batch, failures as NaN results and info 1 (cuSOLVER's rule)."""
    batch = a.shape[:-2]
    results: list[list[Any]] = [[] for _ in range(count)]
    info = np.zeros(batch, dtype=np.int32)
    for index in np.ndindex(batch):
        try:
            values = fn(a[index])
        except np.linalg.LinAlgError:
            values = tuple(np.full_like(v, np.nan) for v in fn_shape(fn, a[index]))
            info[index] = 1
        for slot, value in zip(results, values):
            slot.append(value)
    stacked = tuple(np.stack(r).reshape(batch + r[0].shape) if r else np.empty(0) for r in results)
    return (*stacked, info)


def fn_shape(fn: Callable[[np.ndarray], tuple[Any, ...]], matrix: np.ndarray) -> tuple[Any, ...]:
    """The results ``fn`` would give for a well-conditioned matrix of this shape (for NaN filling)."""
    return fn(np.eye(*matrix.shape, dtype=matrix.dtype))


def _out(*values: Any) -> tuple[Any, ...]:
    return tuple(handed_back(np.require(v, requirements="C")) for v in values)  # 0-d stays 0-d


def cholesky(a: Any) -> tuple[Any, ...]:
    x = _float(a)
    return _out(*_each(x, lambda m: (np.linalg.cholesky(m).astype(x.dtype),), 1))


def solve(a: Any, b: Any) -> tuple[Any, ...]:
    x, y = _float(a), _float(b)
    out = np.empty(y.shape, dtype=np.result_type(x.dtype, y.dtype))
    info = np.zeros(x.shape[:-2], dtype=np.int32)
    for index in np.ndindex(x.shape[:-2]):
        try:
            out[index] = np.linalg.solve(x[index], y[index])
        except np.linalg.LinAlgError:
            out[index], info[index] = np.nan, 1
    return _out(out, info)


def inv(a: Any) -> tuple[Any, ...]:
    x = _float(a)
    return _out(*_each(x, lambda m: (np.linalg.inv(m).astype(x.dtype),), 1))


def _refuse_under_capture(what: str, routine: str, x: np.ndarray) -> None:
    """Refuse under a capture run exactly where the GPU does (``_spectral_routines``, ``_spectral``)."""
    reason = _spectral_routines.refusal(what, routine, x.dtype, x.shape)
    if reason is not None and capture_run_active():
        refuse(FallbackReason.LIBRARY_CALL, reason)


def _numbers(values: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """eigh's / svd's results, or ``LinAlgError`` when their eigen/singular values (the 1-D result)
    hold a NaN: the GPU counts that as a failure in ``info`` (``_spectral._nan_is_a_failure``)."""
    if any(np.isnan(v).any() for v in values if v.ndim == 1):
        raise np.linalg.LinAlgError("a NaN eigen/singular value")
    return values


def eigh(a: Any, uplo: str = "L") -> tuple[Any, ...]:
    x = _float(a)
    _refuse_under_capture("cupygraph.linalg.eigh", _spectral_routines.eigh_routine(x.shape[-1]), x)
    side: Any = uplo
    return _out(*_each(x, lambda m: _numbers(tuple(v.astype(x.dtype) for v in np.linalg.eigh(m, UPLO=side))), 2))


def qr(a: Any) -> tuple[Any, ...]:
    x = _float(a)
    return _out(*_each(x, lambda m: tuple(v.astype(x.dtype) for v in np.linalg.qr(m, mode="reduced")), 2))


def svd(a: Any, full_matrices: bool = True) -> tuple[Any, ...]:
    x = _float(a)
    _refuse_under_capture("cupygraph.linalg.svd", _spectral_routines.svd_routine(*x.shape[-2:]), x)
    return _out(*_each(x, lambda m: _numbers(tuple(v.astype(x.dtype)
                                                   for v in np.linalg.svd(m, full_matrices=full_matrices))), 3))


def slogdet(a: Any) -> tuple[Any, ...]:
    x = _float(a)
    sign, logdet = np.linalg.slogdet(x)  # (0, -inf) for a singular matrix: no failure to report
    return _out(np.asarray(sign, dtype=x.dtype), np.asarray(logdet, dtype=x.dtype))


def det(a: Any) -> Any:
    sign, logdet = slogdet(a)
    return handed_back(np.asarray(plain_array(sign) * np.exp(plain_array(logdet))))
