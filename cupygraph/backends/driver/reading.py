"""The one reading of a recording's graphs: each graph step's snapshot, and its conditional bodies'.

``CupyBackend.capture`` makes it once, right after recording, and hands it to PDL, zero-copy and the
address audit; the recording keeps it for topology. It never fails a capture: where the driver
cannot be read, it holds nothing and each consumer falls back as it would without cuda-bindings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ...errors import CupyGraphError
from ...logs import logger
from . import bindings
from .snapshot import GraphSnapshot, read_graphs


def conditional_bodies(tops: Sequence[GraphSnapshot]) -> list[GraphSnapshot]:
    """Every graph that is the body of a conditional node, at any depth below ``tops``, each once."""
    found: list[GraphSnapshot] = []
    seen: set[int] = set()
    for top in tops:
        for node, _depth in top.walk():
            if node.kind == "conditional":
                for body in node.children:
                    if id(body) not in seen:
                        seen.add(id(body))
                        found.append(body)
    return found


class RecordingGraphs:
    """Snapshots of a recording's graph steps (``tops``, by graph handle) and of every conditional body
    (``bodies``: those nested in them, then those control flow recorded that could not be reached)."""

    def __init__(self, steps: Sequence[Any], recorded_bodies: Sequence[Any], *, needed: bool, drv: Any = None):
        """``drv``: the driver bindings to read with (tests give a fake; default: cuda-bindings)."""
        self.tops: dict[int, GraphSnapshot] = {}
        self.bodies: list[GraphSnapshot] = []
        self.problem: Optional[str] = None
        """Why the graphs could not be read (then there is nothing in ``tops``), or None."""
        if not needed or (drv is None and bindings() is None):
            return
        handles = [int(graph) for graph in (getattr(step, "graph", None) for step in steps) if graph is not None]
        try:
            read = read_graphs(handles, [int(body) for body in recorded_bodies], drv)
        except Exception as err:  # a reading must never cost the capture
            self.problem = f"{type(err).__name__}: {err}"
            logger.debug("cupygraph: the captured graphs could not be read: %s", self.problem)
            return
        self.tops = dict(zip(handles, read[: len(handles)]))
        nested = conditional_bodies(read[: len(handles)])
        self.bodies = nested + [g for g in read[len(handles):] if all(g is not b for b in nested)]

    @property
    def all(self) -> list[GraphSnapshot]:
        return [*self.tops.values(), *self.bodies]

    def top(self, graph: int) -> GraphSnapshot:
        """The snapshot of graph step ``graph``; an error saying why where there is none."""
        found = self.tops.get(graph)
        if found is None:
            if bindings() is None:
                raise CupyGraphError("reading a graph's nodes needs cuda-bindings (pip install cuda-bindings)")
            raise CupyGraphError(f"graph 0x{graph:x} could not be read")
        return found
