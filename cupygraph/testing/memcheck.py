"""Memory poisoning for graph tests: freed pool memory is refilled and watched between replays.

A graph that touches memory it does not own (a freed cuFFT work area, a closure array that was
rebound) looks fine until something else takes that memory. Poisoning makes that happen on
purpose: the free blocks of CuPy's default pool become *sentinels* (allocated, filled with
``POISON_BYTE``, kept) so a replay that writes into freed memory changes a sentinel, and one that
reads freed memory reads NaNs; the free blocks of the function's own pool are filled too (they
hold only scratch that every replay rewrites) and handed back. ``cupygraph.testing.
assert_graph_memory_safe`` drives it; this module has no pytest in it.

Only the free blocks of the current stream's arena of the default pool are reachable (CuPy's
pool keeps free blocks per stream): run the check on the stream your program frees memory on.
Without CuPy (the host backend) poisoning does nothing and the helper checks results alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from ..backends.cupy.pool_blocks import take_free_blocks

__all__ = ["POISON_BYTE", "FreeMemoryPoison", "poison_family", "take_free_blocks"]

POISON_BYTE = 0xFF
"""Fill byte: NaN in every floating dtype, -1 in signed integers, all bits set elsewhere."""


class FreeMemoryPoison:
    """The free blocks of CuPy's default pool, taken as poisoned sentinels until ``release``."""

    def __init__(self) -> None:
        self.sentinels: list[Any] = []
        self._fresh: list[Any] = []

    def take(self, pool: Optional[Any] = None) -> int:
        """Take ``pool``'s (default: CuPy's default pool's) free blocks; return the bytes taken.

        Without CuPy there is no pool to take from: 0.
        """
        try:
            import cupy
        except ImportError:
            return 0

        pool = pool if pool is not None else cupy.get_default_memory_pool()
        taken, fresh = take_free_blocks(pool)
        stream = cupy.cuda.get_current_stream()
        for memory in taken:
            cupy.cuda.runtime.memsetAsync(memory.ptr, POISON_BYTE, memory.mem.size, stream.ptr)
        stream.synchronize()
        self.sentinels.extend(taken)
        self._fresh.extend(fresh)
        return sum(int(m.mem.size) for m in taken)

    def changed(self) -> list[str]:
        """One line per sentinel something wrote into since it was filled."""
        if not self.sentinels:
            return []
        import cupy

        lines = []
        for memory in self.sentinels:
            view = cupy.ndarray((int(memory.mem.size),), cupy.uint8, memory)
            bad = cupy.flatnonzero(view != POISON_BYTE)
            if bad.size:
                lines.append(
                    f"freed pool memory at 0x{memory.ptr:x} ({view.size} bytes, now a sentinel array): "
                    f"{int(bad.size)} bytes overwritten, the first at offset {int(bad[0])}"
                )
        return lines

    def release(self) -> None:
        """Give every block back to the pool (they become free blocks again)."""
        self.sentinels.clear()
        self._fresh.clear()


def poison_family(backend: Any) -> int:
    """Fill the free blocks of a graph family's pool with ``POISON_BYTE``; return the bytes filled.

    A backend without the hook (the host backend) has nothing to poison.
    """
    poison: Optional[Callable[[int], int]] = getattr(backend, "poison_free_memory", None)
    return 0 if poison is None else int(poison(POISON_BYTE))
