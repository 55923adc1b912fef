"""Library state a recording must keep alive: collected while a capture (and its warm-ups) runs.

A graph that calls a library keeps that library's state by address: ``cupygraph.linalg`` bakes
its cuBLAS handle's workspace into the GEMM nodes, ``cupygraph.random`` its generator's state
into the draw kernels. The GPU backend opens ``collecting_held`` around a function's warm-ups and
capture; the library calls ``hold(obj)`` for what the graph will use, and the recording keeps the
list (``CupyRecording.held``) until it is released. An object may describe the device memory it
owns with ``held_regions()`` -> ``[(address, size, label)]``, so the capture audit counts that
memory as held by the graph, not as foreign.

Neutral on purpose: backends and libraries both import it, it imports nothing of cupygraph.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

__all__ = ["collecting_held", "held_regions", "hold", "holding_active", "scopes_open"]

_local = threading.local()
_open_scopes = 0
_open_lock = threading.Lock()


@contextmanager
def collecting_held(held: list[Any]) -> Iterator[list[Any]]:
    """Objects passed to ``hold`` in this thread meanwhile are appended (once each) to ``held``."""
    global _open_scopes
    previous: Optional[list[Any]] = getattr(_local, "held", None)
    _local.held = held
    with _open_lock:
        _open_scopes += 1
    try:
        yield held
    finally:
        _local.held = previous
        with _open_lock:
            _open_scopes -= 1


def holding_active() -> bool:
    """Whether this thread is inside ``collecting_held`` (a cupygraph warm-up or capture)."""
    return getattr(_local, "held", None) is not None


def scopes_open() -> int:
    """How many ``collecting_held`` scopes are open in the whole process (captures in progress)."""
    return _open_scopes


def hold(obj: Any) -> None:
    """Keep ``obj`` alive for as long as the recording being captured in this thread lives."""
    held: Optional[list[Any]] = getattr(_local, "held", None)
    if held is not None and not any(item is obj for item in held):
        held.append(obj)


def held_regions(held: Iterable[Any]) -> Iterator[tuple[int, int, str]]:
    """(address, size, label) of the device memory that held objects describe."""
    for obj in held:
        describe = getattr(obj, "held_regions", None)
        if describe is not None:
            yield from describe()
