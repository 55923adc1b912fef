"""The device memory behind a graph family's CuPy memory pool, owned by the family."""

from __future__ import annotations

import bisect
from typing import Any

import cupy

from .pool_blocks import take_free_blocks

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
        self._blocks.clear()
        self._starts.clear()
        self.nbytes = 0


def fill_free_blocks(pool: Any, blocks: DeviceBlocks, stream: Any, value: int) -> int:
    """Fill the free blocks of ``pool`` (``stream``'s arena) with byte ``value``, taking no new
    memory from the device; return the bytes filled. Waits for the device first: replays in
    flight may still use that scratch."""
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
