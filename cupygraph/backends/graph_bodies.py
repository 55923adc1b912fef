"""Body graphs of the conditional nodes recorded during a capture, and where each came from.

``control_flow`` adds conditional nodes (``while_loop``, ``cond``, ``switch``) and captures their bodies
into graphs of their own. It notes each body here, with its node, the node's type and, in words, the
user's call that made it. The capture reads the bodies from these notes (``driver/reading.py``):
before instantiation, to refuse a body holding a node CUDA refuses there, naming that call; after it,
for the audit, PDL and topology, because a graph's node list does not lead into its conditional
bodies on every driver (``cuGraphNodeGetParams`` describes conditional nodes only on recent drivers;
cuda.core reads them back from CUDA 13.2 on).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["NotedBody", "collecting_bodies", "note_body"]

_recorded = threading.local()


@dataclasses.dataclass(frozen=True)
class NotedBody:
    """One body graph of a conditional node that control flow recorded."""

    graph: Any
    """The body graph's handle."""
    node: Any
    """The conditional node's handle."""
    kind: str
    """The node's type, as the graph reader names it: ``if``, ``while`` or ``switch``."""
    origin: str
    """Which body of which call, in words: ``branch 2 of the switch (at model.py:12: ...)``."""


@contextmanager
def collecting_bodies() -> Iterator[list[NotedBody]]:
    """The body graphs this thread records meanwhile (``note_body`` appends to the list)."""
    previous = getattr(_recorded, "bodies", None)
    bodies: list[NotedBody] = []
    _recorded.bodies = bodies
    try:
        yield bodies
    finally:
        _recorded.bodies = previous


def note_body(body: NotedBody) -> None:
    """Called by ``control_flow`` for each body graph it creates under capture."""
    collected = getattr(_recorded, "bodies", None)
    if collected is not None:
        collected.append(body)
