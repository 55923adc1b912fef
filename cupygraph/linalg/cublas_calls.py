"""CuPy's own cuBLAS calls, run on cupygraph's handles: what ``routes/cupy_libraries.py`` routes to.

CuPy reaches cuBLAS through functions of ``cupy_backends.cuda.libs.cublas`` that take a handle
first and cuBLAS's arguments after it, and refuse a capturing stream. ``run_as_cupy_would`` runs
one such call with the same arguments on this thread's cupygraph handle, bound to the current
stream and that stream's own workspace (``_cublas_handles``): nothing is allocated during a
capture, and the graph holds the handle and workspace it was captured with.

Scalars: CuPy's products pass alpha and beta as host pointers, its handle in host pointer mode; only
``cupy.cublas``'s own API (``cupy.cublas.geam`` with an array ``alpha``) switches its handle to device
pointer mode first. ``routable`` tells: a call whose handle reads scalars elsewhere than from the host
is left to CuPy (it fails a capture as before), never run on a handle that would read a device
address as host memory.
"""

from __future__ import annotations

from typing import Any, Optional

from ._binding import POINTER_MODE_HOST, ROUTINES
from ._cublas_handles import handle_for

__all__ = ["CUPY_CUBLAS_CALLS", "REPORTS_INFO", "routable", "run_as_cupy_would"]

CUPY_CUBLAS_CALLS: dict[str, Optional[str]] = {
    # CuPy's function: the binding's method taking cuBLAS's arguments, or None: ``routine`` (``_binding.ROUTINES``)
    "gemmEx": "gemm",
    "gemmStridedBatchedEx": "gemm_strided_batched",
    **dict.fromkeys(ROUTINES),
}
REPORTS_INFO = frozenset(name for name in CUPY_CUBLAS_CALLS if "getr" in name)
"""The batched LU routines whose ``info`` CuPy reads on the host under ``cupyx.errstate(linalg="raise")``
(as it reads every cuSOLVER routine's); products report none."""


def routable(args: tuple[Any, ...]) -> bool:
    """Whether CuPy's call with these arguments (its handle first) reads its scalars from the host, as
    the routed call does: its handle is in host pointer mode (False where that cannot be read)."""
    try:
        from cupy_backends.cuda.libs import cublas

        return int(cublas.getPointerMode(args[0])) == POINTER_MODE_HOST
    except Exception:  # (no CuPy's cuBLAS, a handle it does not know): leave the call to CuPy
        return False


def run_as_cupy_would(name: str, args: tuple[Any, ...]) -> None:
    """CuPy's ``cublas.<name>(handle, *rest)`` as cuBLAS's ``<symbol>(our handle, *rest)``."""
    import cupy

    method = CUPY_CUBLAS_CALLS[name]
    handle = handle_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream())  # CuPy's: the current device's
    handle.set_pointer_mode(POINTER_MODE_HOST)  # as CuPy's handle reads them (``routable``)
    if method is None:
        handle.lib.routine(name, handle.ptr, *args[1:])
    else:
        getattr(handle.lib, method)(handle.ptr, *args[1:])
