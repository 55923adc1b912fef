"""Which edges of a recorded graph become programmatic (PDL): the decision, on a description.

Pure Python, so it is tested on the CPU; ``rewrite.py`` describes real CUDA graphs with cuda-bindings
and applies the choice. The rule: an edge becomes programmatic only when it is a plain edge from a
kernel node to a kernel node whose kernel waits (``griddepcontrol.wait`` before touching memory,
found in its PTX). Every other edge stays: memcpy, memset, kernels found not to wait, kernels whose
code could not be scanned (library kernels, CuPy's ufuncs), child graphs, conditional nodes (their
bodies are separate graphs, described on their own, so an edge never crosses a body's boundary).
The host backend records no graph and no edges.

Why this is safe: the consumer cannot read or write memory before its predecessors have finished
and their writes are visible; a producer that also waits finished after its own predecessors, so
what a kernel reads two or more steps later is ready too.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

__all__ = ["Edge", "EdgeChoice", "GraphDescription", "KeptReason", "Node", "PdlSummary", "choose_edges"]

MAX_NAMED = 16  # kernels named in a summary: bounded, whatever the graph


class KeptReason(str, enum.Enum):
    """Why an edge stayed plain (counted by value)."""

    FROM_NON_KERNEL = "producer_not_kernel"
    TO_NON_KERNEL = "consumer_not_kernel"
    CONSUMER_DOES_NOT_WAIT = "consumer_does_not_wait"
    """The consumer's code was scanned and does not wait (or was built before sm_90)."""
    CONSUMER_NOT_SCANNED = "consumer_not_scanned"
    """The consumer's code could not be read: whether it waits is unknown, so it counts as not waiting."""
    NOT_PLAIN = "edge_not_plain"
    SHARED_CONSUMER = "consumer_has_other_dependencies"


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of a recorded graph. ``kind``: kernel, memcpy, memset, conditional, graph, empty, ...

    For a kernel, ``waits`` says whether its code waits for its predecessors before touching
    memory, and ``reason`` why not; ``scanned`` whether its code was read at all (a kernel that was
    not is never taken to wait).
    """

    kind: str
    name: str = ""
    waits: bool = False
    reason: str = ""
    scanned: bool = False


@dataclasses.dataclass(frozen=True)
class Edge:
    """A dependency ``src -> dst``; ``plain`` for CUDA's default edge (type default, port 0)."""

    src: Hashable
    dst: Hashable
    plain: bool = True


@dataclasses.dataclass(frozen=True)
class GraphDescription:
    nodes: Mapping[Hashable, Node]
    edges: Sequence[Edge]


@dataclasses.dataclass(frozen=True)
class EdgeChoice:
    convert: tuple[Edge, ...]
    kept: Mapping[str, int]
    """Edges left plain, by ``KeptReason`` value."""
    not_converted: Mapping[str, str]
    """Kernels that consume a kernel's output but do not wait or were not scanned: name -> why (at most
    MAX_NAMED)."""


def choose_edges(graph: GraphDescription, *, sole_dependency_only: bool = False) -> EdgeChoice:
    """The edges of ``graph`` to make programmatic.

    ``sole_dependency_only`` converts only edges into kernels that have no other dependency: the
    narrower choice, tried when a driver refuses a node with several programmatic dependencies.
    """
    incoming = Counter(edge.dst for edge in graph.edges)
    convert: list[Edge] = []
    kept: Counter[str] = Counter()
    not_converted: dict[str, str] = {}
    for edge in graph.edges:
        src, dst = graph.nodes.get(edge.src), graph.nodes.get(edge.dst)
        if src is None or src.kind != "kernel":
            kept[KeptReason.FROM_NON_KERNEL.value] += 1
        elif dst is None or dst.kind != "kernel":
            kept[KeptReason.TO_NON_KERNEL.value] += 1
        elif not edge.plain:
            kept[KeptReason.NOT_PLAIN.value] += 1
        elif not dst.waits:
            why = KeptReason.CONSUMER_DOES_NOT_WAIT if dst.scanned else KeptReason.CONSUMER_NOT_SCANNED
            kept[why.value] += 1
            if len(not_converted) < MAX_NAMED:
                not_converted.setdefault(dst.name or "<unnamed kernel>", dst.reason or "it does not wait")
        elif sole_dependency_only and incoming[edge.dst] > 1:
            kept[KeptReason.SHARED_CONSUMER.value] += 1
        else:
            convert.append(edge)
    return EdgeChoice(tuple(convert), dict(kept), not_converted)


@dataclasses.dataclass
class PdlSummary:
    """What programmatic dependent launch did to one recording (``Recording.pdl``)."""

    converted: int = 0
    kept: Counter[str] = dataclasses.field(default_factory=Counter)
    not_converted: dict[str, str] = dataclasses.field(default_factory=dict)
    """Kernels left behind plain edges, name -> why (at most MAX_NAMED)."""
    off_reason: str = ""
    """Why nothing was converted at all (PDL off, no sm_90, the driver refused), if so."""

    def add(self, choice: EdgeChoice) -> None:
        self.converted += len(choice.convert)
        self.kept.update(choice.kept)
        for name, why in choice.not_converted.items():
            if len(self.not_converted) < MAX_NAMED:
                self.not_converted.setdefault(name, why)

    @property
    def kept_total(self) -> int:
        return sum(self.kept.values())
