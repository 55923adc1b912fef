"""The static buffers of a graph family: shared input buffers, and what a function writes into them.

``InputArena`` lets the graphs of one signature read views of one buffer per argument. ``WriteBack``
does to the caller's arrays what the function did to the static copies, for a function that writes
into its copied arguments (found at capture by comparing the buffers, ``changed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.base import Backend


class InputArena:
    """Static input buffers shared by the graphs of one signature, sized for the largest batch.

    Graphs of one family run one after another (the family's exec lock and stream ordering), so
    they can read their inputs from views of one buffer: memory grows with the largest graph, not
    with the sum. ``state`` records which entry last wrote the buffers and for how many real rows,
    so the padding is rewritten whenever another graph wrote there since.
    """

    __slots__ = ("buffers", "state")

    def __init__(self) -> None:
        self.buffers: dict[int, Any] = {}
        self.state: Any = None

    def view(self, backend: Backend, position: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """A buffer of ``shape`` for argument ``position``: a view of the shared one when it fits."""
        base = self.buffers.get(position)
        if base is None or base.shape[:1] < shape[:1] or base.shape[1:] != shape[1:] or base.dtype != dtype:
            base = backend.empty(shape, dtype)
            self.buffers[position] = base
        return base[: shape[0]] if base.ndim else base


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

    def __init__(self, arena: InputArena, static_inputs: Sequence[Any], whole_inputs: Sequence[Any],
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
