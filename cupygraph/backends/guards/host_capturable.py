"""How the host reference runs an op that captures on the GPU (``cupygraph.matmul``, ``linalg``,
``random``, the collectives): on plain views of its arrays, its results handed back guarded.

A capture run refuses ``@`` and ``np.linalg`` on its ``CaptureArray`` views, as CuPy refuses them
under stream capture; the ops cupygraph makes capturable must not be refused, so they compute on
plain arrays. What they return is guarded again, so a later ``float()`` of it is still refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .host_guard import guarded
from .host_refusal import capture_run_active, library_state_used

__all__ = ["handed_back", "plain_array"]


def plain_array(x: Any) -> Any:
    """``x`` as a plain ``np.ndarray`` view (no copy) when it is a subclass (a ``CaptureArray``)."""
    return x.view(np.ndarray) if isinstance(x, np.ndarray) and type(x) is not np.ndarray else x


def handed_back(array: Any) -> Any:
    """``array`` as the op returns it: guarded during a capture run, as it is otherwise. The op's GPU twin
    keeps library state in its recording (a handle, a generator's state), so this one is noted as doing so."""
    if not capture_run_active():
        return array
    library_state_used()
    return guarded(array)
