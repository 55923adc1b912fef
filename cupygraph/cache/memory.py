"""Memory accounting of one graph cache: the static input arenas and the bytes its graphs hold.

Graphs of one signature read views of one shared static buffer per argument (``InputArena``),
sized for the largest batch; a buffer counts once, at its real size, however many graphs read
it, and is let go as soon as no held graph reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .entry import CUDAGraphEntry
from .key import Signature
from .padding import InputArena


def base_array(buf: Any) -> Any:
    """The array that owns ``buf``'s memory (an arena buffer hands out views of it)."""
    return buf.base if buf.base is not None else buf


def total_bytes(entries: Iterable[CUDAGraphEntry]) -> int:
    """Bytes held by ``entries``: recorded outputs and scratch, and static buffers counted once."""
    statics: dict[int, int] = {}
    total = 0
    for entry in entries:
        total += entry.recording.nbytes
        for buf in entry.static_inputs + entry.whole_inputs:
            base = base_array(buf)
            statics[id(base)] = int(base.nbytes)
    return total + sum(statics.values())


class StaticArenas:
    """The input arenas of one cache, one per signature. Not thread-safe: the cache's lock guards it."""

    def __init__(self) -> None:
        self._arenas: dict[Signature, InputArena] = {}

    def arena(self, signature: Signature) -> InputArena:
        """The arena of ``signature`` (made on first use)."""
        arena = self._arenas.get(signature)
        if arena is None:
            arena = self._arenas[signature] = InputArena()
        return arena

    def signatures(self) -> set[Signature]:
        """The signatures whose static buffers are held."""
        return set(self._arenas)

    def drop_unused(self, signature: Signature, held: Iterable[CUDAGraphEntry]) -> None:
        """Let go of static buffers no held graph reads: a signature's whole arena when none of its
        graphs is left (each new shape makes one), else a larger buffer whose graph was evicted."""
        arena = self._arenas.get(signature)
        if arena is None:
            return
        used = {id(base_array(buf)) for e in held if e.key.signature == signature
                for buf in e.static_inputs + e.whole_inputs}
        if not used:
            del self._arenas[signature]
            return
        for position, buf in list(arena.buffers.items()):
            if id(buf) not in used:
                del arena.buffers[position]

    def clear(self) -> None:
        self._arenas.clear()
