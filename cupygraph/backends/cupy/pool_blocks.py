"""Taking a CuPy memory pool's free blocks: the backend fills a family's scratch with them, and
the test helpers poison freed memory with them. CuPy is imported only when a pool is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["take_free_blocks"]

_SMALLEST_BLOCK = 512  # CuPy rounds every pool allocation up to a multiple of this
_MAX_FRESH_BYTES = 1 << 30
_MAX_STEPS = 100_000


def _floor_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n > 0 else 0


def take_free_blocks(
    pool: Any, would_grow: tuple[type[BaseException], ...] = (), max_fresh_bytes: int = _MAX_FRESH_BYTES,
) -> tuple[list[Any], list[Any]]:
    """Allocate from ``pool`` until its free blocks (current stream) are used up.

    Returns (taken, fresh): ``taken`` came from free blocks (memory something else held before),
    ``fresh`` made the pool grow (no reuse; kept only so the next, smaller request does not split
    it). Requests halve from the largest power of two below the free bytes, so any free block of
    512 bytes or more is eventually taken. ``would_grow``: exceptions the pool's allocator raises
    to refuse growing (then nothing is fresh).
    """
    from cupy.cuda.memory import OutOfMemoryError

    refused = (OutOfMemoryError, *would_grow)
    taken: list[Any] = []
    fresh: list[Any] = []
    fresh_bytes = 0
    size = _floor_power_of_two(int(pool.free_bytes()))
    for _ in range(_MAX_STEPS):
        free = int(pool.free_bytes())
        if size < _SMALLEST_BLOCK or free < _SMALLEST_BLOCK:
            break
        if size > free:
            size = _floor_power_of_two(free)
            continue
        before = int(pool.total_bytes())
        try:
            memory = pool.malloc(size)
        except refused:
            size //= 2
            continue
        if int(pool.total_bytes()) == before:
            taken.append(memory)
            continue
        fresh.append(memory)
        fresh_bytes += size
        size //= 2
        if fresh_bytes > max_fresh_bytes:
            break
    return taken, fresh
