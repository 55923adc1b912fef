"""The host reference's refusals: the capture run's guard, ``refuse``, and which NumPy functions it refuses.

``host_guard.py`` makes the static buffers ``CaptureArray`` views whose hooks call in here; ops
elsewhere (``host_escapes``, the host linalg, control flow, collectives) ask ``capture_run_active``
and ``refuse`` too. The products the GPU routes to capture-safe implementations
(``backends/routing.py``) are let through and noted as routed, with the GPU's label; the routed
``np.linalg`` calls are run by ``routes/numpy_linalg.py`` before they get here.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Optional

import numpy as np

from ...errors import CaptureError
from ...frames import location_in_stack
from ...hints import where_and_instead
from ...reasons import FallbackReason
from ..routing import note_routed, routing_enabled


class RefusedOp(CaptureError):
    """An op the GPU cannot capture, refused on the host; ``reason`` is its code."""

    def __init__(self, message: str, reason: FallbackReason):
        super().__init__(message)
        self.reason = reason


class _Guard:
    """One capture run: whether refusals are on, and the first refusal (caught or not)."""

    def __init__(self) -> None:
        self.active = True
        self.first: Optional[tuple[str, FallbackReason]] = None
        self.library_state = False
        """Whether the GPU's recording would hold library state (``backends/holding.py``): then it binds
        nothing (``CopyReason.LIBRARY_STATE``), and neither does the host's."""


_local = threading.local()


def active_guard() -> Optional[_Guard]:
    guard: Optional[_Guard] = getattr(_local, "guard", None)
    return guard if guard is not None and guard.active else None


def refuse(reason: FallbackReason, what: str, called: str = "") -> NoReturn:
    """Raise the refusal of ``what`` (the user's line and a way out in the message), and keep it as the
    capture run's first, which the run raises at its end even if the function caught this one."""
    message = f"{reason.text}: {what}{where_and_instead(sys._getframe(1), reason.value, called)}"
    guard = active_guard()
    if guard is not None and guard.first is None:
        guard.first = (message, reason)
    raise RefusedOp(message, reason)


D2H_HINT = "CuPy would copy the value to the host, which a graph cannot hold; keep it an array"
SHAPE_HINT = "a graph records fixed shapes; keep the shape with np.where(mask, x, fill)"


def host_read(what: str) -> NoReturn:
    refuse(FallbackReason.DEVICE_TO_HOST, f"{what} reads array data on the host ({D2H_HINT})")


@contextmanager
def reads_allowed() -> Iterator[None]:
    """Refusals off in this thread for a while: for work the GPU does outside the graph or on the
    device (a graph-break op, the condition of ``cupygraph.while_loop`` / ``cond``)."""
    guard = active_guard()
    if guard is None:
        yield
        return
    guard.active = False
    try:
        yield
    finally:
        guard.active = True


def capture_run_active() -> bool:
    """Whether this thread runs a host capture with refusals on: ops that capture on the GPU
    (``cupygraph.matmul``, ``cupygraph.random``) compute on plain arrays, then hand back guarded ones."""
    return active_guard() is not None

@contextmanager
def guard_scope() -> Iterator[_Guard]:
    """Refusals on for this thread meanwhile (the capture run); yields its guard."""
    guard = _Guard()
    previous = getattr(_local, "guard", None)
    _local.guard = guard
    try:
        yield guard
    finally:
        _local.guard = previous


LIBRARY_HINT = "which CuPy cannot capture (mark the op with cupygraph.graph_break and use PIECEWISE mode)"
CUBLAS_UFUNCS = frozenset({"matmul", "vecdot", "matvec", "vecmat"})


def _functions(*names: str) -> frozenset[Any]:
    return frozenset(getattr(np, n) for n in names if hasattr(np, n))


_CUBLAS = _functions("dot", "vdot", "inner", "tensordot", "einsum", "cov", "corrcoef", "polyfit")
_ROUTED_PRODUCTS = frozenset({"matmul", "dot", "vdot", "inner", "tensordot", "einsum", "cov", "corrcoef"})
"""The products whose CuPy twins reach cuBLAS only through the calls ``routes/cupy_libraries.py`` routes
(``polyfit`` solves a least-squares problem: cuSOLVER)."""


def routed_product(name: str) -> bool:
    """Whether the GPU routes product ``name`` now (``backends/routing.py``): the host lets it through
    and notes it, with the same label as the GPU's (``cuBLAS`` and the user's line)."""
    if name not in _ROUTED_PRODUCTS or not routing_enabled():
        return False
    library_state_used()  # (the GPU's routed product: cupygraph's cuBLAS handle and workspace)
    note_routed(f"cuBLAS{location_in_stack(sys._getframe(1))}")
    return True
_DATA_SHAPED = _functions(
    "nonzero", "argwhere", "flatnonzero", "unique", "unique_all", "unique_counts", "unique_inverse", "unique_values",
    "bincount", "compress", "extract", "trim_zeros", "setdiff1d", "intersect1d", "union1d", "setxor1d",
)
_HISTOGRAMS = _functions("histogram", "histogram_bin_edges", "histogram2d", "histogramdd")
_PRINTING = _functions("array2string", "array_repr", "array_str", "save", "savetxt", "savez")
SHAPE_ONLY = _functions(
    "shape", "ndim", "size", "iscomplexobj", "isrealobj", "isfortran", "may_share_memory", "shares_memory",
    "can_cast", "result_type", "min_scalar_type",
)


def svd_norm(args: Any, kwargs: Any) -> bool:
    """Whether ``norm(x, ord=None, axis=None, keepdims=False)`` is computed from singular values: ord 2, -2
    or 'nuc' of a matrix, which ``cupy.linalg.norm`` takes from cuSOLVER's SVD. Every other norm is a
    reduction kernel in CuPy, which captures: the host lets those through."""
    x = args[0] if args else kwargs.get("x")
    order = args[1] if len(args) > 1 else kwargs.get("ord")
    axis = args[2] if len(args) > 2 else kwargs.get("axis")
    matrix = (axis is None and getattr(x, "ndim", None) == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if isinstance(order, str):
        return matrix and order == "nuc"
    number = isinstance(order, (int, float, np.integer, np.floating)) and not isinstance(order, (bool, np.bool_))
    return matrix and number and order in (2, -2)


def library_state_used() -> None:
    """An op of the capture run whose GPU twin keeps library state in the recording ran: a cuBLAS or
    cuSOLVER handle and workspace, a generator's state, a cuFFT plan (``backends/holding.py``)."""
    guard = active_guard()
    if guard is not None:
        guard.library_state = True


def check_function(func: Any, args: Any, kwargs: Any) -> None:
    name = getattr(func, "__name__", "function")
    if str(getattr(func, "__module__", "")).startswith("numpy.fft"):
        library_state_used()  # (CuPy's FFT: a cuFFT plan the graph holds)
    if func in _CUBLAS and not routed_product(name):
        refuse(FallbackReason.LIBRARY_CALL, f"np.{name} calls cuBLAS, {LIBRARY_HINT}", f"numpy.{name}")
    if str(getattr(func, "__module__", "")).startswith("numpy.linalg") and (name != "norm" or svd_norm(args, kwargs)):
        # (the calls the GPU routes never get here: routes/numpy_linalg.py runs them on plain arrays)
        refuse(FallbackReason.LIBRARY_CALL, f"np.linalg.{name} calls cuSOLVER, {LIBRARY_HINT}", f"linalg.{name}")
    if func in _DATA_SHAPED or (func is np.where and len(args) + len(kwargs) == 1):
        label = "np.where with one argument" if func is np.where else f"np.{name}"
        refuse(FallbackReason.DATA_DEPENDENT_SHAPE, f"{label} ({SHAPE_HINT})", f"numpy.{name}")
    if func in _HISTOGRAMS and kwargs.get("range") is None and not isinstance(
            args[1] if len(args) > 1 else kwargs.get("bins", 10), (np.ndarray, list, tuple)):
        refuse(FallbackReason.DEVICE_TO_HOST, f"np.{name} without range= ({D2H_HINT}: pass range= or bin edges)")
    if func in _PRINTING:
        host_read(f"np.{name}")
