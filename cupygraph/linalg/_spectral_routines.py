"""Which cuSOLVER routine computes ``eigh`` / ``svd`` of a matrix, and whether a graph can hold it.

The one owner of that rule: the GPU path (``_spectral``) calls the routine named here, and the
host reference (``_solvers_host``) refuses under a capture exactly where the GPU does, so both
backends graph the same keys. Plain Python: no CuPy.

Evidence (``tools/probe_cusolver_capture.py`` at commit 357e924, two runs on one H100 80GB HBM3, CUDA runtime 13.2,
cuSOLVER 12.0.4, CuPy 14.2, 2026-11-26; each candidate on a fresh handle in its own process):

* ``syevd``, ``syevj``, ``Xsyevd``, ``gesvd``, ``Xgesvd``, ``Xgesvdp``: fail under stream capture
  with CUSOLVER_STATUS_INTERNAL_ERROR, and the handle then fails the next eager call
  (EXECUTION_FAILED). ``gesvdj``: fails under capture with EXECUTION_FAILED.
* ``XsyevBatched`` (one matrix): captures; at 8 and 32 rows correct on every input, eager runs
  bit-identical in float64 (float32: correct, but the last bits vary from run to run); at 48
  rows it reported no convergence (info 19, 27) on ordinary matrices in the second run, so it
  is used up to 32 rows only.
* ``gesvdjBatched`` (one matrix): captures, correct and bit-reproducible; its limit is 32 rows
  and columns (INVALID_VALUE above).
* ``syevjBatched``: captures, but returned NaN eigenvalues with info 0 (8 and 32 rows): not used.
"""

from __future__ import annotations

from typing import Any, Optional

CAPTURE_MAX = 32
"""The largest rows/columns XsyevBatched and gesvdjBatched are used for (see the evidence above)."""

CAPTURABLE = frozenset({"xsyev_batched", "gesvdj_batched"})


def eigh_routine(n: int) -> str:
    """The cuSOLVER routine (without an s/d prefix) ``eigh`` of an (n, n) matrix runs."""
    return "xsyev_batched" if n <= CAPTURE_MAX else "syevd"


def svd_routine(m: int, n: int) -> str:
    """The cuSOLVER routine (without an s/d prefix) ``svd`` of an (m, n) matrix runs."""
    return "gesvdj_batched" if max(m, n) <= CAPTURE_MAX else "gesvd"


PREFIX = {"f": "s", "d": "d"}
"""cuSOLVER's precision prefix by dtype character: float32 s, float64 d (the dtypes it is given)."""


def prefixed(dtype: Any, name: str) -> str:
    """``name`` with cuSOLVER's precision prefix for a float32 (s) or float64 (d) matrix."""
    return PREFIX.get(dtype.char, "d") + name


def refusal(what: str, name: str, dtype: Any, shape: tuple[int, ...]) -> Optional[str]:
    """Why ``what`` (running routine ``name``) on a ``dtype`` matrix of ``shape`` cannot be captured,
    or None when it can."""
    if name in CAPTURABLE:
        return None
    dims = "x".join(str(d) for d in shape)
    batched = "XsyevBatched" if "eigh" in what else "gesvdjBatched"
    return (f"{what} of a {dims} matrix runs cuSOLVER {prefixed(dtype, name)}, which cannot be captured into a "
            f"graph (it fails under stream capture); matrices up to {CAPTURE_MAX}x{CAPTURE_MAX} capture "
            f"({batched}); the key runs eagerly")
