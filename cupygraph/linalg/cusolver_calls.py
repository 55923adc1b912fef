"""CuPy's own cuSOLVER calls, run on cupygraph's handles: what ``routes/cupy_libraries.py`` routes to.

``cupy.linalg`` (``solve``, ``inv``, ``cholesky``, ``qr``, ``det`` of large matrices) reaches
cuSOLVER through functions of ``cupy_backends.cuda.libs.cusolver`` that take a handle first and
cuSOLVER's arguments after it, and refuse a capturing stream. ``run_as_cupy_would`` runs one such
call with the same arguments on this thread's cupygraph cuSOLVER handle (``_cusolver.handle``, bound
to the current stream; the recording holds it), through nvmath-python's binding: the same routine
on the same operands, so the result is CuPy's. The workspaces are CuPy's own arrays of the current
allocator (the family's pool under ``jit``); the ``info`` flags stay on the device (CuPy reads them
only when ``cupyx.errstate(linalg=...)`` asks, and then the capture fails as before).

Only routines that capture are routed (``getrf``/``getrs``/``potrf``/``potrs``/``geqrf``/``orgqr`` and
their buffer-size queries: cupygraph's own solvers use them under capture); CuPy's ``eigh`` and ``svd``
call routines that fail under capture (``syevd``, ``gesvd``: README), which are left to CuPy.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CUPY_CUSOLVER_CALLS", "run_as_cupy_would"]

_REAL = ("getrf_bufferSize", "getrf", "getrs", "potrf_bufferSize", "potrf", "potrs", "geqrf_bufferSize", "geqrf")
CUPY_CUSOLVER_CALLS: frozenset[str] = frozenset(
    [f"{t}{name}" for t in "sdcz" for name in _REAL]
    + [f"{t}orgqr{size}" for t in "sd" for size in ("", "_bufferSize")]
    + [f"{t}ungqr{size}" for t in "cz" for size in ("", "_bufferSize")])
"""CuPy's names of the routed ``cupy_backends.cuda.libs.cusolver`` functions."""


def nvmath_name(name: str) -> str:
    """nvmath.bindings.cusolverDn's name for CuPy's (``sgetrf_bufferSize`` -> ``sgetrf_buffer_size``)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def run_as_cupy_would(name: str, args: tuple[Any, ...]) -> Any:
    """CuPy's ``cusolver.<name>(handle, *rest)`` on this thread's cupygraph handle; what CuPy's returns
    (the workspace size of a ``_bufferSize`` query, else None)."""
    import cupy

    from ._cusolver import handle  # (imports CuPy: only once a call is routed)

    return handle(cupy.cuda.Device().id).call(nvmath_name(name), *args[1:])
