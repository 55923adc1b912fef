"""The host reference's twin of ``cupy_linalg.py``: ``numpy.linalg`` and SciPy CSR products routed as the GPU's.

While the GPU records a function, the ``cupy.linalg`` calls and cupyx CSR products that
``linalg/routable`` accepts run cupygraph's capture-safe routines. The host reference routes their
NumPy / SciPy twins by the same rule, so it graphs the same keys: while a recording runs in a thread,
the ``numpy.linalg`` functions of ``routable.ROUTED_FUNCTIONS`` and the products of SciPy's CSR classes
(when SciPy is in use; it is never imported here) are replaced there (``uploads.Interception``). A call
the user's code makes that the rule accepts runs NumPy's (SciPy's) own function on plain arrays, its
results handed back guarded during the capture run, and is noted with the GPU's label (``cuSOLVER`` or
``cuSPARSE`` and the user's line); any other call goes on to the capture run's guard, which refuses it
as the GPU fails it (``host_refusal``, ``host_escapes``).

The values are NumPy's, with one change that mirrors the GPU: where NumPy raises ``LinAlgError`` (a
singular matrix for ``solve`` / ``inv``, one not positive definite for ``cholesky``, no convergence),
the results are NaN, per matrix of a batch, as cupygraph.linalg's routines give on the GPU (a graph
cannot raise; CuPy's own code, which runs ``solve``, ``inv``, ``det``, ``slogdet`` and one-matrix ``qr`` and
``cholesky`` there, raises nothing either and leaves what cuSOLVER left); so is a NaN eigen- or singular
value, which the GPU counts as a failure too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from ..backends.guards.host_capturable import handed_back, plain_array
from ..backends.guards.host_refusal import capture_run_active
from ..backends.guards.uploads import UNTOUCHED, Interception
from ..backends.routing import note_routed, routing_enabled
from ..frames import called_from_user, location_in_stack
from ..linalg.routable import SPARSE_LABEL, RoutedCall, linalg_call, routed_targets, sparse_call

__all__ = ["routed_numpy_linalg"]

_BATCHED_FAILURES = ("solve", "inv", "cholesky")
"""The routed functions of a batch of matrices that NumPy refuses whole when one matrix fails."""
_SPECTRAL = ("eigh", "eigvalsh", "svd")


def _targets() -> list[tuple[Any, str, str]]:
    return routed_targets(np.linalg, sys.modules.get("scipy.sparse"))


_interception = Interception(_targets)


def _host_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and not isinstance(x, np.matrix)


def _call(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[RoutedCall]:
    """The call to route, or None to leave it to NumPy / SciPy (and the guard)."""
    if label.startswith(SPARSE_LABEL):
        if len(args) != 2 or kwargs:
            return None
        call = sparse_call(label[len(SPARSE_LABEL):], args[0], args[1])
        return call if call is not None and _host_array(args[1]) else None
    call = linalg_call(label, args, kwargs)
    return call if call is not None and all(_host_array(x) for x in call.arrays) else None


def _leaves(result: Any) -> list[Any]:
    return list(result) if isinstance(result, tuple) else [result]


def _rebuilt(result: Any, leaves: list[Any]) -> Any:
    """``leaves`` in ``result``'s structure (an array, a tuple or one of NumPy's named tuples)."""
    if not isinstance(result, tuple):
        return leaves[0]
    return type(result)(*leaves) if hasattr(result, "_fields") else tuple(leaves)


def _nan(result: Any) -> Any:
    """``result`` with every floating-point value NaN (integer results, lstsq's rank, stay)."""
    return _rebuilt(result, [np.full_like(v, np.nan) if np.asarray(v).dtype.kind in "fc" else v
                             for v in _leaves(result)])


def _stand_in(x: Any) -> Any:
    """A well-conditioned matrix (stack) of ``x``'s shape and dtype: what a failed call's NaN results are shaped as."""
    return np.broadcast_to(np.eye(*x.shape[-2:], dtype=x.dtype), x.shape).copy()


def _failed(original: Callable[..., Any], call: RoutedCall) -> Any:
    """NaN results of the call NumPy refused; for a batch, per matrix: the others are NumPy's."""
    arrays = [plain_array(x) for x in call.arrays]
    a = arrays[0]
    if call.name not in _BATCHED_FAILURES or a.ndim == 2:
        return _nan(original(_stand_in(a), *arrays[1:], **call.given))
    results = []
    for index in np.ndindex(a.shape[:-2]):
        rest = [b if b.ndim == 1 else b[index] for b in arrays[1:]]  # (solve's vector serves every matrix)
        try:
            results.append(original(a[index], *rest, **call.given))
        except np.linalg.LinAlgError:
            results.append(_nan(original(_stand_in(a[index]), *rest, **call.given)))
    return np.stack(results).reshape(a.shape[:-2] + results[0].shape)


def _handed_back(result: Any) -> Any:
    """``result`` as the capture run hands it back: guarded, scalars as 0-d arrays (as CuPy's)."""
    if not capture_run_active():
        return result
    return _rebuilt(result, [handed_back(np.asarray(v)) for v in _leaves(result)])




def _numpy_result(original: Callable[..., Any], call: RoutedCall, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    try:
        result = original(*(plain_array(x) for x in args), **{k: plain_array(v) for k, v in kwargs.items()})
    except np.linalg.LinAlgError:
        result = _failed(original, call)
    if call.name in _SPECTRAL and any(np.isnan(v).any() for v in _leaves(result) if np.ndim(v) == 1):
        result = _nan(result)
    return _handed_back(result)


def _route(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Frames: called_from_user <- _route <- the replacement <- the caller (not NumPy, SciPy, cupygraph:
    # ``csr.dot(x)`` calls ``csr @ x`` inside SciPy, as cupyx's does, which the GPU does not route again)
    if not routing_enabled() or not called_from_user(2):
        return UNTOUCHED
    call = _call(label, args, kwargs)
    if call is None:
        return UNTOUCHED
    result = _numpy_result(original, call, args, kwargs)
    note_routed(f"{call.library}{location_in_stack(sys._getframe(1))}")  # the GPU's label
    return result


@contextmanager
def routed_numpy_linalg(fn: Any = None) -> Iterator[None]:
    """The routed ``numpy.linalg`` calls and SciPy CSR products in this thread run as the GPU's routes meanwhile."""
    with _interception.active(_route, fn):
        yield
