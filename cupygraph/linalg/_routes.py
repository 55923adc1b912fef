"""Which cuSOLVER routine computes ``eigh`` / ``svd`` of a matrix, and whether a graph can hold it.

The one owner of that rule: the GPU path (``_spectral``) calls the routine named here, and the
host reference (``_solver_host``) refuses under a capture exactly where the GPU does, so both
backends graph the same keys. Plain Python: no CuPy.

Evidence (``tools/probe_cusolver_capture.py``; H100, CUDA 13.2, CuPy 14.2): ``syevd`` and
``gesvd`` fail under stream capture with CUSOLVER_STATUS_INTERNAL_ERROR, and the failed capture
left the handle unusable for the eager call after it, so they are refused before any call. The
batched Jacobi routines ``syevjBatched`` and ``gesvdjBatched`` (one matrix, their params object
made with the handle) capture; they take matrices of at most 32 rows and columns.
"""

from __future__ import annotations

from typing import Any, Optional

JACOBI_MAX = 32
"""syevjBatched / gesvdjBatched take matrices up to 32 x 32 (cuSOLVER's limit)."""

CAPTURABLE = frozenset({"syevj_batched", "gesvdj_batched"})


def eigh_routine(n: int) -> str:
    """The cuSOLVER routine (without its s/d prefix) ``eigh`` of an (n, n) matrix runs."""
    return "syevj_batched" if n <= JACOBI_MAX else "syevd"


def svd_routine(m: int, n: int) -> str:
    """The cuSOLVER routine ``svd`` of an (m, n) matrix runs."""
    return "gesvdj_batched" if max(m, n) <= JACOBI_MAX else "gesvd"


def prefixed(dtype: Any, name: str) -> str:
    """``name`` with cuSOLVER's precision prefix for a float32 (s) or float64 (d) matrix."""
    return ("s" if dtype.char == "f" else "d") + name


def refusal(what: str, name: str, dtype: Any, shape: tuple[int, ...]) -> Optional[str]:
    """Why ``what`` (running routine ``name``) on a ``dtype`` matrix of ``shape`` cannot be captured,
    or None when it can."""
    if name in CAPTURABLE:
        return None
    dims = "x".join(str(d) for d in shape)
    return (f"{what} of a {dims} matrix runs cuSOLVER {prefixed(dtype, name)}, which cannot be captured into a "
            f"graph (it fails under stream capture); only matrices up to {JACOBI_MAX}x{JACOBI_MAX} capture "
            f"(Jacobi, {'syevjBatched' if 'eigh' in what else 'gesvdjBatched'}); the key runs eagerly")
