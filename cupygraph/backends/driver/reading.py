"""The one reading of a recording's graphs: each graph step's snapshot, and its conditional bodies'.

``CupyBackend.capture`` reads the conditional bodies control flow recorded before each graph piece is
instantiated (``ConditionalBodyCheck``: a body holding a node CUDA refuses in a conditional body is
refused there, naming the user's call, not by the driver at instantiation), then the whole recording
once, right after recording (``RecordingGraphs``, reusing the bodies already read), and hands that
to PDL, zero-copy and the address audit; the recording keeps it for topology. A reading never fails
a capture: where the driver cannot be read, it holds nothing and each consumer falls back as it
would without cuda-bindings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

from ...errors import CaptureError, CupyGraphError
from ...logs import logger
from ...reasons import FallbackReason
from . import bindings
from .snapshot import GraphSnapshot, Node, read_graphs

ALLOWED_IN_BODIES = frozenset({"kernel", "empty", "graph", "memset", "memcpy", "conditional"})
"""The node kinds CUDA lets a conditional body hold, in child graphs and nested bodies too
(``cudaConditionalNodeParams::phGraph_out``)."""

_REFUSED_WORDS = {
    "host": "a host node (a host callback: Stream.launch_host_func, cudaLaunchHostFunc)",
    "wait_event": "an event-wait node (a wait on an external event, as NCCL records)",
    "event_record": "an event-record node (an external event recorded, as NCCL does)",
    "ext_semas_signal": "an external-semaphore signal node",
    "ext_semas_wait": "an external-semaphore wait node",
    "mem_alloc": "a memory-allocation node (a stream-ordered allocation: cudaMallocAsync, cupy.cuda.MemoryAsyncPool)",
    "mem_free": "a memory-free node (a stream-ordered free: cudaFreeAsync, cupy.cuda.MemoryAsyncPool)",
    "batch_mem_op": "a batch memory-operation node (cuStreamBatchMemOp: a stream wait or write of a value)",
}


class ConditionalBody(Protocol):
    """A body graph control flow recorded (``backends/graph_bodies.NotedBody``)."""

    @property
    def graph(self) -> Any: ...
    @property
    def node(self) -> Any: ...
    @property
    def kind(self) -> str: ...
    @property
    def origin(self) -> str: ...


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


def _describe_from_notes(graphs: Sequence[GraphSnapshot], noted: Sequence[ConditionalBody],
                         read: Mapping[int, GraphSnapshot]) -> None:
    """Conditional nodes the driver could not describe, described from what control flow noted (their
    type and bodies, in order), so topology and the walks below reach their bodies on every driver."""
    by_node: dict[int, list[ConditionalBody]] = {}
    for body in noted:
        by_node.setdefault(int(body.node), []).append(body)
    seen: set[int] = set()
    stack = list(graphs)
    while stack:
        graph = stack.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        for node in graph.nodes:
            mine = by_node.get(node.key) if node.kind == "conditional" and node.conditional is None else None
            if mine and all(int(body.graph) in read for body in mine):
                node.conditional, node.problem = mine[0].kind, None
                node.children = tuple(read[int(body.graph)] for body in mine)
            stack.extend(node.children)


class ConditionalBodyCheck:
    """Before a graph piece is instantiated: the conditional bodies recorded since the last check, read and
    refused with a ``CaptureError`` when one holds a node a conditional body cannot hold."""

    def __init__(self, noted: Sequence[ConditionalBody], drv: Any = None):
        """``noted``: the capture's list of recorded bodies (it grows while the capture runs). ``drv``: the
        driver bindings to read with (tests give a fake; default: cuda-bindings)."""
        self.noted = noted
        self.drv = drv
        self.read: dict[int, GraphSnapshot] = {}
        """Each body read, by graph handle: the recording's reading reuses them."""
        self._checked = 0

    def before_instantiation(self) -> None:
        new = list(self.noted[self._checked:])
        self._checked = len(self.noted)
        drv = self.drv if self.drv is not None else bindings()
        if not new or drv is None:
            return
        handles = [int(body.graph) for body in new]
        try:
            snapshots = read_graphs([], handles, drv, known=self.read)
        except Exception as err:  # the driver will still refuse at instantiation: never fail here
            logger.debug("cupygraph: the conditional bodies could not be read before instantiation: %s: %s",
                         type(err).__name__, err)
            return
        self.read.update((graph.handle, graph) for snapshot in snapshots for graph in snapshot.graphs())
        _describe_from_notes(snapshots, self.noted, self.read)
        noted_graphs = {int(body.graph) for body in self.noted}
        for body in new:
            snapshot = self.read.get(int(body.graph))
            refused = None if snapshot is None else _first_refused(snapshot, noted_graphs)
            if refused is not None:
                raise CaptureError(refusal(body.origin, *refused))


def _first_refused(body: GraphSnapshot, noted_graphs: set[int]) -> Optional[tuple[Node, Optional[str]]]:
    """The first node ``body`` holds (its child graphs included; bodies noted on their own are checked with
    their own origin) that a conditional body cannot hold, with the kernel recorded before it."""
    before: Optional[str] = None
    for node in body.nodes:
        if node.kind not in ALLOWED_IN_BODIES and node.kind != "unknown":
            return node, before
        if node.kernel is not None:
            before = node.kernel.name or before
        for child in node.children:
            if child.handle not in noted_graphs:
                found = _first_refused(child, noted_graphs)
                if found is not None:
                    return found[0], found[1] or before
    return None


def refusal(origin: str, node: Node, kernel_before: Optional[str]) -> str:
    """The message for a refused node: the code's text, the node in words, the body and the user's line."""
    words = _REFUSED_WORDS.get(node.kind, f"a {node.kind.replace('_', ' ')} node")
    where = f", recorded after kernel `{kernel_before}`" if kernel_before else ", recorded before any kernel of it"
    return (f"{FallbackReason.CONDITIONAL_BODY_NODE.text}: the {origin} holds {words}{where}. CUDA runs only "
            "kernel, empty, child graph, memset, memcpy and conditional nodes in a conditional body, and would "
            "refuse this graph at instantiation; move the op that made it out of the body")


class RecordingGraphs:
    """Snapshots of a recording's graph steps (``tops``, by graph handle) and of every conditional body
    (``bodies``: those nested in them, then those control flow recorded that could not be reached)."""

    def __init__(self, steps: Sequence[Any], recorded_bodies: Sequence[ConditionalBody], *, needed: bool,
                 drv: Any = None, known: Optional[Mapping[int, GraphSnapshot]] = None):
        """``drv``: the driver bindings to read with (tests give a fake; default: cuda-bindings). ``known``:
        graphs read already (``ConditionalBodyCheck.read``), not read again."""
        self.tops: dict[int, GraphSnapshot] = {}
        self.bodies: list[GraphSnapshot] = []
        self.problem: Optional[str] = None
        """Why the graphs could not be read (then there is nothing in ``tops``), or None."""
        if not needed or (drv is None and bindings() is None):
            return
        handles = [int(graph) for graph in (getattr(step, "graph", None) for step in steps) if graph is not None]
        body_handles = [int(body.graph) for body in recorded_bodies]
        try:
            read = read_graphs(handles, body_handles, drv, known=known)
            by_handle = {graph.handle: graph for graph in read}
            by_handle.update(known or {})
            _describe_from_notes(read, recorded_bodies, by_handle)
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
