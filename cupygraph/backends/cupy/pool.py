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

    ALIGNMENT = 4096
    """Where each block of 4 KiB or more starts: a 4 KiB boundary. ``cudaMalloc`` packs allocations
    512 bytes apart, so a family's blocks used to start wherever earlier small allocations left off;
    measured on an H200 (2026-11-27, ``benchmarks/hot_path.md``), the 100-kernel chain's graph launch
    took 124.7 µs of GPU time on buffers 512 bytes past a 4 KiB boundary and 117.6-118.3 µs on
    aligned ones."""

    def __init__(self) -> None:
        self._blocks: dict[int, tuple[Any, int]] = {}
        """{start: (the allocation holding the block, the block's size)}"""
        self._starts: list[int] = []
        self.nbytes = 0
        """Device memory held, alignment padding included."""
        self.refusing = False
        """While set, the pool may only hand out blocks it already has (``PoolWouldGrow``)."""

    def allocate(self, size: int) -> Any:
        if self.refusing:
            # Not a CUDA out-of-memory error: CuPy's pool would free its cached blocks on one.
            raise PoolWouldGrow(size)
        # cudaMalloc returns at least 256-byte aligned memory: this much extra always fits an aligned
        # start. Blocks under 4 KiB (scalars, small scratch) are left as they come: padding each of
        # them would cost more memory than their placement costs time. (Allocating once more only
        # when a block lands off the boundary would free the first try: a cudaFree, which may not
        # run while a stream captures, and the pool grows during capture.)
        padding = self.ALIGNMENT - 256 if size >= self.ALIGNMENT else 0
        memory = cupy.cuda.Memory(size + padding)
        start = -(-int(memory.ptr) // self.ALIGNMENT) * self.ALIGNMENT if padding else int(memory.ptr)
        self._blocks[start] = (memory, size)
        bisect.insort(self._starts, start)
        self.nbytes += int(memory.size)
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(start, size, memory), 0)

    def owner_of(self, ptr: int) -> Any:
        """The allocation holding address ``ptr``, or None when it is not this family's memory."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        start = self._starts[i]
        memory, size = self._blocks[start]
        return memory if ptr < start + size else None

    def regions(self) -> list[tuple[int, int]]:
        return [(start, self._blocks[start][1]) for start in self._starts]

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
