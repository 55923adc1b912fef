"""Body graphs of the conditional nodes recorded during a capture, for the memory audit.

``control_flow`` adds conditional nodes (``while_loop``, ``cond``) and captures their bodies into
graphs of their own; the GPU backend's audit walks those bodies after the capture, because a
graph's node list does not lead into them on every driver (``cuGraphNodeGetParams``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["collecting_bodies", "note_body"]

_recorded = threading.local()


@contextmanager
def collecting_bodies() -> Iterator[list[Any]]:
    """The body graphs this thread records meanwhile (``note_body`` appends to the list)."""
    previous = getattr(_recorded, "bodies", None)
    bodies: list[Any] = []
    _recorded.bodies = bodies
    try:
        yield bodies
    finally:
        _recorded.bodies = previous


def note_body(body: Any) -> None:
    """Called by ``control_flow`` for each body graph it creates under capture."""
    collected = getattr(_recorded, "bodies", None)
    if collected is not None:
        collected.append(body)
