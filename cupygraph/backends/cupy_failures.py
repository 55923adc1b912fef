"""Why CuPy refused to capture an op, in a user's words and under its ``FallbackReason`` code.

Imported only with the CuPy backend.
"""

from __future__ import annotations

from typing import Optional

import cupy

from ..frames import location_in_traceback
from ..reasons import FallbackReason

__all__ = ["describe_capture_failure"]


_LIBRARIES = ("cuBLAS", "cuRAND", "cuSOLVER", "cuSPARSE", "cuDNN", "cuTENSOR", "cuFFT")
_CAPTURABLE_INSTEAD = {  # what keeps the op inside the graph
    "cuBLAS": "cupy.matmul / @ / dot; use cupygraph.matmul or cupygraph.linalg.gemm, which capture",
    "cuRAND": "cupy.random; use cupygraph.random.default_rng(seed), which captures",
}


def describe_capture_failure(err: BaseException) -> Optional[str]:
    """Why ``err`` means "this op cannot be captured", in a user's words; None for other errors.

    Errors that are not about capture (a bug in the user's function) are re-raised unchanged.
    Each description starts with its reason code's text (``FallbackReason``), so the front door
    counts it under that code; the host backend's refusals read the same.
    """
    message = str(err)
    # `` (at file:line: code)`` of the user's innermost frame: CuPy's compiled frames have relative
    # paths and no source line, so ``frames`` judges a frame by its module and every form of its path.
    where = location_in_traceback(err)
    if isinstance(err, NotImplementedError) and "capture" in message:
        for library in _LIBRARIES:
            if library in message:
                op = _CAPTURABLE_INSTEAD.get(library, library)
                return f"{FallbackReason.LIBRARY_CALL.text}: {library} ({op}){where}"
        return f"{FallbackReason.LIBRARY_CALL.text}: {message}{where}"
    if isinstance(err, cupy.cuda.memory.OutOfMemoryError):
        return f"{FallbackReason.OUT_OF_MEMORY.text}: {message}"
    if isinstance(err, RuntimeError) and "capturing" in message:
        if "D2H" in message or "synchronous" in message:
            return f"{FallbackReason.DEVICE_TO_HOST.text}{where}"
        if "invalidated" in message:
            return (f"{FallbackReason.CAPTURE_FAILED.text}: an operation invalidated the capture "
                    f"(a synchronisation or host transfer){where}")
        return f"{FallbackReason.CAPTURE_FAILED.text}: {message}{where}"
    if isinstance(err, cupy.cuda.runtime.CUDARuntimeError) and "Capture" in message:
        return f"{FallbackReason.CAPTURE_FAILED.text}: {message}{where}"
    return None
