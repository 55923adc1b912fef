"""The device memory behind a graph family's CuPy memory pool, owned by the family."""

from __future__ import annotations

import bisect
import sys
from typing import Any

import cupy

__all__ = ["DeviceBlocks", "PoolWouldGrow", "fill_free_blocks"]


class PoolWouldGrow(Exception):
    """A family's pool was asked for new device memory while only its free blocks may be used."""


class DeviceBlocks:
    """The device memory behind one family's pool, owned here rather than by the pool.

    Graphs keep using blocks the pool considers free (intermediates freed during capture, and
    outputs, which later captures of the family may reuse). CuPy's pool frees its free blocks on
    its own when an allocation fails; owning the memory here means such a free only forgets the
    block, never returns memory a graph still uses. The memory goes back when the family holds no
    graph (``release``), except blocks a caller still holds a view of.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, Any] = {}
        self._starts: list[int] = []
        self.nbytes = 0
        self.refusing = False
        """While set, the pool may only hand out blocks it already has (``PoolWouldGrow``)."""

    def allocate(self, size: int) -> Any:
        if self.refusing:
            # Not a CUDA out-of-memory error: CuPy's pool would free its cached blocks on one.
            raise PoolWouldGrow(size)
        memory = cupy.cuda.Memory(size)
        self._blocks[memory.ptr] = memory
        bisect.insort(self._starts, memory.ptr)
        self.nbytes += size
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(memory.ptr, size, memory), 0)

    def owner_of(self, ptr: int) -> Any:
        """The block holding address ``ptr``, or None when it is not this family's memory."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        memory = self._blocks[self._starts[i]]
        return memory if ptr < memory.ptr + memory.size else None

    def regions(self) -> list[tuple[int, int]]:
        return [(ptr, int(self._blocks[ptr].size)) for ptr in self._starts]

    def release(self) -> None:
        """Forget the blocks the pool gave back (called after ``free_all_blocks``).

        A block the pool still lends out (a caller's view of an output, a chunk in use on another
        thread) stays known: it is still this family's memory, and once the pool reuses it for a
        later capture the audit must not take it for memory of unknown owner.
        """
        # References to a block the pool no longer holds: this dict, the loop name, getrefcount's
        # argument. A chunk still lent out holds one more (through its UnownedMemory).
        kept = {ptr: memory for ptr, memory in self._blocks.items() if sys.getrefcount(memory) > 3}
        self._blocks = kept
        self._starts = sorted(kept)
        self.nbytes = sum(int(memory.size) for memory in kept.values())


def fill_free_blocks(pool: Any, blocks: DeviceBlocks, stream: Any, value: int) -> int:
    """Fill the free blocks of ``pool`` (``stream``'s arena) with byte ``value``, taking no new
    memory from the device; return the bytes filled. Waits for the device first: replays in
    flight may still use that scratch."""
    from ..memcheck import take_free_blocks

    cupy.cuda.Device().synchronize()
    blocks.refusing = True
    try:
        with stream:
            taken, _ = take_free_blocks(pool, (PoolWouldGrow,))
    finally:
        blocks.refusing = False
    for memory in taken:
        cupy.cuda.runtime.memsetAsync(memory.ptr, value, memory.mem.size, stream.ptr)
    stream.synchronize()
    return sum(int(memory.mem.size) for memory in taken)  # freed on return: back to their free lists
