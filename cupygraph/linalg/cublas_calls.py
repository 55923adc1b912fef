"""CuPy's own cuBLAS calls, run on cupygraph's handles: what ``routes/cupy_libraries.py`` routes to.

CuPy reaches cuBLAS through functions of ``cupy_backends.cuda.libs.cublas`` that take a handle
first and cuBLAS's arguments after it, and refuse a capturing stream. ``run_as_cupy_would`` runs
one such call with the same arguments on this thread's cupygraph handle, bound to the current
stream and that stream's own workspace (``_cublas_handles``): nothing is allocated during a
capture, and the graph holds the handle and workspace it was captured with.
"""

from __future__ import annotations

from typing import Any, Optional

from ._binding import POINTER_MODE_HOST, ROUTINES
from ._cublas_handles import handle_for

__all__ = ["CUPY_CUBLAS_CALLS", "run_as_cupy_would"]

CUPY_CUBLAS_CALLS: dict[str, tuple[Optional[str], str]] = {
    # CuPy's function: (the binding's method taking cuBLAS's arguments, or None: ``routine``; cuBLAS's name)
    "gemmEx": ("gemm", "cublasGemmEx"),
    "gemmStridedBatchedEx": ("gemm_strided_batched", "cublasGemmStridedBatchedEx"),
    **{name: (None, symbol) for name, (symbol, _, _) in ROUTINES.items()},
}


def run_as_cupy_would(name: str, args: tuple[Any, ...]) -> None:
    """CuPy's ``cublas.<name>(handle, *rest)`` as cuBLAS's ``<symbol>(our handle, *rest)``."""
    import cupy

    method, _ = CUPY_CUBLAS_CALLS[name]
    handle = handle_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream())  # CuPy's: the current device's
    handle.set_pointer_mode(POINTER_MODE_HOST)  # CuPy passes alpha and beta as host pointers
    if method is None:
        handle.lib.routine(name, handle.ptr, *args[1:])
    else:
        getattr(handle.lib, method)(handle.ptr, *args[1:])
