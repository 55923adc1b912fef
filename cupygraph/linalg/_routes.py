"""Which cuSOLVER routine computes ``eigh`` / ``svd`` of a matrix, and whether a graph can hold it.

The one owner of that rule: the GPU path (``_spectral``) calls the routine named here, and the
host reference (``_solver_host``) refuses under a capture exactly where the GPU does, so both
backends graph the same keys. Plain Python: no CuPy.

Evidence (``tools/probe_cusolver_capture.py``, one H100 80GB HBM3, CUDA runtime 13.2, cuSOLVER
12.0.4, CuPy 14.2, 2026-11-26): under stream capture ``syevd``, ``syevj``, ``Xsyevd``,
``gesvd``, ``Xgesvd`` and ``Xgesvdp`` fail with CUSOLVER_STATUS_INTERNAL_ERROR and leave their
handle failing the next eager call (EXECUTION_FAILED); ``gesvdj`` fails with EXECUTION_FAILED.
``XsyevBatched`` (one matrix) captured at 8, 32 and 48 rows and its replays were correct;
``gesvdjBatched`` captured and replayed bit for bit with eager calls, up to its limit of 32 rows
and columns (INVALID_VALUE above). ``syevjBatched`` captured but returned NaN eigenvalues with
info 0 for a 32 x 32 matrix, so it is not used.
"""

from __future__ import annotations

from typing import Any, Optional

JACOBI_MAX = 32
"""gesvdjBatched takes matrices up to 32 x 32 (cuSOLVER's limit)."""

CAPTURABLE = frozenset({"xsyev_batched", "gesvdj_batched"})


def eigh_routine(n: int) -> str:
    """The cuSOLVER routine ``eigh`` of an (n, n) matrix runs: XsyevBatched on one matrix, any n."""
    return "xsyev_batched"


def svd_routine(m: int, n: int) -> str:
    """The cuSOLVER routine ``svd`` of an (m, n) matrix runs (without its s/d prefix)."""
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
            "(gesvdjBatched); the key runs eagerly")
