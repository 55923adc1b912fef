"""Zero-copy arguments: when a replay may read the caller's array instead of a copy of it.

One decision for every backend (``copy_reason``) and the counters both keep. A graph reads fixed
addresses; re-pointing its nodes at the caller's array skips the copy into the static buffer,
but only where the result cannot differ from eager execution:

* at capture (``BufferFacts``, from the backend's look at the recording): every node that
  reads the buffer is one the backend can re-point, no pointer falls into the buffer's
  allocation outside the buffer, nothing else (an eager step between PIECEWISE pieces, a library
  plan, an output view) holds its address;
* on each call (``copy_reason``): the caller's array has the very layout the graph was captured
  with (shape = capture size, dtype, C-contiguous strides), is aligned as the backend requires
  and lives on the graph's device. A padded batch keeps the copy: the graph would read past the
  caller's rows.

Outputs under ``output_mode="copy"`` follow the same rules: the graph writes straight into a
fresh array the caller owns.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

from ...logs import logger

__all__ = ["BufferFacts", "CopyReason", "argument_label", "copy_reason", "log_copied", "output_label"]


class CopyReason(str, enum.Enum):
    """Why an argument (or output) is copied instead of bound to the caller's array."""

    PADDED = "padded"
    SHAPE = "shape"
    DTYPE = "dtype"
    STRIDES = "strides"
    ALIGNMENT = "alignment"
    DEVICE = "device"
    NOT_AN_ARRAY = "not_an_array"
    PIECEWISE = "piecewise"
    LIBRARY_STATE = "library_state"
    UNSUPPORTED_NODE = "unsupported_node"
    COPY_NODE = "copy_node"
    STRADDLES = "straddles"
    END_POINTER = "end_pointer"
    OUTPUT_ALIAS = "output_alias"
    NOT_OWNED = "not_owned"
    SHARED_ALLOCATION = "shared_allocation"
    NO_DRIVER = "no_driver"
    FAMILY_MEMORY = "family_memory"

    @property
    def text(self) -> str:
        return _TEXTS[self]


_TEXTS = {
    CopyReason.PADDED: "a padded batch: the graph reads more rows than the caller's array has",
    CopyReason.SHAPE: "its shape differs from the one the graph was captured with",
    CopyReason.DTYPE: "its dtype differs from the one the graph was captured with",
    CopyReason.STRIDES: "it is not C-contiguous like the static buffer (a view with other strides)",
    CopyReason.ALIGNMENT: "its address is not aligned as the static buffer's is",
    CopyReason.DEVICE: "it lives on another device than the graph",
    CopyReason.NOT_AN_ARRAY: "it is not an array of the backend",
    CopyReason.PIECEWISE: "an eager step between PIECEWISE pieces reads or writes it (the host reference "
                          "copies every argument of a PIECEWISE graph)",
    CopyReason.LIBRARY_STATE: "the graph holds library state (a cuFFT plan, a cuBLAS workspace, a pointer "
                              "table) that may keep the address where the graph's nodes do not show it",
    CopyReason.UNSUPPORTED_NODE: "the graph has a node that cannot be re-pointed or read (a child graph, a "
                                 "conditional body, a host callback, a kernel without a readable layout)",
    CopyReason.COPY_NODE: "a memcpy or memset node of the graph touches it",
    CopyReason.STRADDLES: "the graph points into its allocation outside its bytes (another buffer of the "
                          "capture overlaps it)",
    CopyReason.END_POINTER: "the graph holds a pointer just past its end, which may belong to the next buffer",
    CopyReason.OUTPUT_ALIAS: "an output of the function is a view of it",
    CopyReason.NOT_OWNED: "the output is not memory the capture allocated (an argument, a global)",
    CopyReason.SHARED_ALLOCATION: "another output shares its allocation",
    CopyReason.NO_DRIVER: "the CUDA driver's graph-update entry point or cuda-bindings is not available",
    CopyReason.FAMILY_MEMORY: "it is memory of the function's own graphs (an output_mode='view' output passed "
                              "back), which a replay may write before it has read the argument",
}


def copy_reason(
    captured: Any, given: Any, *, captured_address: int, given_address: int, alignment: int,
) -> Optional[CopyReason]:
    """Why ``given`` (the caller's array) cannot stand in for ``captured`` (the static buffer), or None.

    Both are arrays with ``shape``, ``dtype`` and ``strides``; ``alignment`` is what the backend
    requires of the caller's address (a power of two, at most the static buffer's own alignment).
    The rules are the backends' common ground; the CuPy backend's per-call check is this function
    specialised to what its shortcuts already guarantee (see ``node_pointers.py``).
    """
    if given.shape != captured.shape:
        return CopyReason.PADDED if given.shape[1:] == captured.shape[1:] else CopyReason.SHAPE
    if given.dtype != captured.dtype:
        return CopyReason.DTYPE
    if given.strides != captured.strides and any(n > 1 for n in given.shape):
        return CopyReason.STRIDES
    mask = alignment - 1
    if given_address & mask or captured_address & mask:
        return CopyReason.ALIGNMENT
    return None


class BufferFacts:
    """What the backend found at capture about one buffer: whether it can ever be rebound, and how."""

    __slots__ = ("patches", "reason")

    def __init__(self, reason: Optional[CopyReason], patches: Any = None):
        self.reason = reason
        """Why the buffer is copied on every call (None: it may be rebound, subject to ``copy_reason``)."""
        self.patches = patches
        """The backend's way to re-point the graph at another array (its nodes and parameter words)."""


def argument_label(position: int) -> str:
    return f"argument {position}"


def output_label(index: int) -> str:
    return f"output {index}"


def prepare_counts(rebinds: Counter[str], copies: Counter[str], labels: Sequence[str]) -> None:
    """Put ``labels`` into both counters, so the hot path only adds to existing keys."""
    for label in labels:
        rebinds.setdefault(label, 0)
        copies.setdefault(label, 0)


def log_copied(fn_name: str, label: str, reason: CopyReason) -> None:
    """``CUPYGRAPH_LOG=debug``: why an argument or output is copied (once per cause and graph)."""
    logger.debug("%s(): %s is copied, not bound to the caller's array: %s", fn_name, label, reason.text)
