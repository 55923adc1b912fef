"""The ``host_uploads`` field of ``CUDAGraphConfig``: what a capture does with host data (issues 20, 29).

Declared here, beside the model, so its documentation lives where it is declared without growing
``model.py``; ``backends/guards/uploads.py`` implements the three choices.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

HostUploads = Literal["fallback", "constant", "auto"]

HOST_UPLOADS: Any = Field(
    "auto",
    description="A host-to-device upload during capture (cupy.asarray of a list or NumPy array, a list q passed to "
    "cupy.percentile, the filter weights cupyx.scipy.ndimage uploads, ndarray.set). auto (the default): the graph "
    "uploads the bytes the capture saw, from a pinned snapshot it owns, when they were identical in every warm-up "
    "run and the capture; else the key runs eagerly and the reason names the call. What auto gives up: the values "
    "are frozen at capture, and data that changes only between calls (a counter, the time) looks constant to it, "
    "a heuristic, not a proof; a capture with no warm-up (num_warmups 0, or after the first call wrote into an "
    "array it reads by address) cannot compare and refuses every upload. fallback: every upload runs the key "
    "eagerly, naming the call (the strict choice: never freezes host data). constant: every upload is frozen at "
    "capture, unchecked.",
)
