"""The ``host_uploads`` field of ``CUDAGraphConfig``: what a capture does with host data (issue 20).

Declared here, beside the model, so its documentation lives where it is declared without growing
``model.py``; ``backends/guards/uploads.py`` implements the three choices.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

HostUploads = Literal["fallback", "constant", "auto"]

HOST_UPLOADS: Any = Field(
    "fallback",
    description="A host-to-device upload during capture (cupy.asarray(numpy_array), the filter weights "
    "cupyx.scipy.ndimage uploads, ndarray.set). fallback: the key runs eagerly and the reason names the call "
    "(the default: the only choice that never freezes host data that changes). constant: the graph uploads "
    "the bytes the capture saw, from a pinned snapshot it owns; the values are frozen at capture. auto: "
    "constant when the bytes were identical in every warm-up run and the capture (needs num_warmups >= 1), "
    "else fallback naming the call; data that changes only between calls still looks constant to it.",
)
