"""What a function writes into its static buffers, and doing it to the caller's arrays too.

``WriteBack`` does to the caller's arrays what the function did to the static copies, for a function
that writes into its copied arguments (found by comparing the buffers, ``changed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def same_bytes(xp: Any, a: Any, b: Any) -> bool:
    """Bit-for-bit equality (NaNs included) of two arrays of one shape and dtype."""
    return bool(xp.array_equal(a.reshape(-1).view(xp.uint8), b.reshape(-1).view(xp.uint8)))


def changed(xp: Any, buffers: Sequence[Any], snapshots: Sequence[Any]) -> list[int]:
    """Positions of the ``buffers`` whose bytes differ from their ``snapshots``."""
    return [k for k, (buf, before) in enumerate(zip(buffers, snapshots)) if not same_bytes(xp, buf, before)]


class WriteBack:
    """What a function that writes into its copied arguments did, done to the caller's arrays.

    Under a graph the function writes into the static copies; the eager call would have changed
    the caller's arrays. After each launch the rows it wrote are copied back, and the padding it
    may have written is marked for rewriting.
    """

    __slots__ = ("arena", "batched", "count", "whole")

    def __init__(self, arena: Any, static_inputs: Sequence[Any], whole_inputs: Sequence[Any],
                 written: Sequence[int]):
        count = self.count = len(static_inputs)
        self.arena = arena
        self.batched = [(k, static_inputs[k]) for k in written if k < count]
        self.whole = [(k - count, whole_inputs[k - count]) for k in written if k >= count]

    def __call__(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any], copied: int = -1) -> None:
        """``copied``: a bit per buffer (batched, then whole) that held the call's data; a bound
        argument was written in place by the graph itself."""
        for k, buf in self.batched:
            if copied >> k & 1:
                inputs[k][...] = buf[:rows]
        count = self.count
        for k, buf in self.whole:
            if copied >> (count + k) & 1:
                whole[k][...] = buf
        self.arena.state = None
