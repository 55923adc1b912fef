"""Why CuPy refused to capture an op, in a user's words and under its ``FallbackReason`` code.

Imported only with the CuPy backend.
"""

from __future__ import annotations

from typing import Optional

import cupy

from ...frames import call_site_in_traceback
from ...hints import HOST_UPLOAD_HINT, replacement
from ...reasons import FallbackReason

__all__ = ["describe_capture_failure"]


_LIBRARIES = ("cuBLAS", "cuRAND", "cuSOLVER", "cuSPARSE", "cuDNN", "cuTENSOR", "cuFFT")
_CAPTURABLE_INSTEAD = {  # what keeps the op inside the graph, where ``hints`` knows nothing closer
    "cuBLAS": "cupy.matmul / @ / dot call it: use cupygraph.matmul or cupygraph.linalg.gemm, which capture",
    "cuRAND": "cupy.random calls it: use cupygraph.random.default_rng(seed), which captures",
}


def describe_capture_failure(err: BaseException) -> Optional[str]:
    """Why ``err`` means "this op cannot be captured", in a user's words; None for other errors.

    Errors that are not about capture (a bug in the user's function) are re-raised unchanged.
    Each description starts with its reason code's text (``FallbackReason``), so the front door
    counts it under that code; the host backend's refusals read the same. It ends with the user's
    line (`` (at file:line: code)``: CuPy's compiled frames have relative paths and no source, so
    ``frames`` judges a frame by its module and every form of its path) and, where one exists,
    the capturable replacement (``hints``).
    """
    found = _classify(err)
    if found is None:
        return None
    reason, text = found
    site = call_site_in_traceback(err)
    if site is None:
        return text
    if reason is FallbackReason.HOST_UPLOAD:  # an upload CuPy makes where host_uploads cannot bake it
        return f"{text}{site.location()}; {HOST_UPLOAD_HINT}"
    hint = replacement(reason.value, site.called, site.code)
    library = next((name for name in _CAPTURABLE_INSTEAD if text.endswith(f": {name}")), None)
    if not hint and library is not None:
        hint = f"; {_CAPTURABLE_INSTEAD[library]}"
    return f"{text}{site.location()}{hint}"


def _classify(err: BaseException) -> Optional[tuple[FallbackReason, str]]:
    message = str(err)
    if isinstance(err, NotImplementedError) and "capture" in message:
        for library in _LIBRARIES:
            if library in message:
                return FallbackReason.LIBRARY_CALL, f"{FallbackReason.LIBRARY_CALL.text}: {library}"
        return FallbackReason.LIBRARY_CALL, f"{FallbackReason.LIBRARY_CALL.text}: {message}"
    if isinstance(err, cupy.cuda.memory.OutOfMemoryError):
        return FallbackReason.OUT_OF_MEMORY, f"{FallbackReason.OUT_OF_MEMORY.text}: {message}"
    if isinstance(err, RuntimeError) and "capturing" in message:
        if "H2D" in message:  # an upload CuPy made where cupygraph's interception does not reach
            return FallbackReason.HOST_UPLOAD, f"{FallbackReason.HOST_UPLOAD.text}: {message}"
        if "D2H" in message or "synchronous" in message:
            return FallbackReason.DEVICE_TO_HOST, FallbackReason.DEVICE_TO_HOST.text
        if "invalidated" in message:
            return FallbackReason.CAPTURE_FAILED, (f"{FallbackReason.CAPTURE_FAILED.text}: an operation invalidated "
                                                   "the capture (a synchronisation or host transfer)")
        return FallbackReason.CAPTURE_FAILED, f"{FallbackReason.CAPTURE_FAILED.text}: {message}"
    if isinstance(err, cupy.cuda.runtime.CUDARuntimeError) and "Capture" in message:
        return FallbackReason.CAPTURE_FAILED, f"{FallbackReason.CAPTURE_FAILED.text}: {message}"
    return None
