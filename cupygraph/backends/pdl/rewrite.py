"""Programmatic dependent launch on captured CuPy graphs: read, decide, rewrite, re-instantiate.

CuPy's ``end_capture()`` instantiates at once but keeps the graph it captured (``Graph.graph``).
After the capture (``CupyBackend.capture`` calls ``apply_pdl`` right after recording), every
graph of the recording and every conditional body is described from the capture's snapshot
(``driver/snapshot.py``: node kinds, kernels' functions, edges), ``edges.choose_edges`` picks the
edges to convert, they are replaced with programmatic edges (type 1 from port 1), and each graph
is instantiated again. The recording (``cupy/recording.py``) launches the new executable in place
of CuPy's and destroys it; CuPy's ``Graph`` stays for its un-instantiated graph and DOT output.

Whatever fails here — no cuda-bindings, a GPU before sm_90, a driver that refuses the edges — the
recording keeps CuPy's executable with plain edges, and the reason is logged (debug) and kept in
``Recording.pdl``. Nothing here may fail a capture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Optional

from ...logs import logger
from ..driver import bindings, ok
from ..driver.snapshot import GraphSnapshot
from ..driver.snapshot import Node as SnapshotNode
from .discovery import NOT_FOUND, KernelFinder
from .edges import Edge, EdgeChoice, GraphDescription, Node, PdlSummary, choose_edges
from .modules import known_module

__all__ = ["apply_pdl"]


_MIN_ARCH = 90  # griddepcontrol needs sm_90 (Hopper)


def _nothing() -> tuple[Any, ...]:
    return ()


def apply_pdl(steps: list[Any], tops: dict[int, GraphSnapshot], bodies: Sequence[GraphSnapshot], setting: str,
              device_id: int, label: str, reachable: Callable[[], Iterable[Any]] = _nothing,
              ) -> tuple[PdlSummary, dict[int, int]]:
    """Make the kernel->kernel edges of ``steps``' graphs (and their conditional ``bodies``) programmatic
    where safe. ``tops``: the capture's snapshot of each graph step, by graph handle. ``reachable``:
    the CuPy kernel objects the captured function reaches, asked only when a kernel's module is not
    known yet (``discovery``).

    ``steps`` holds CuPy ``Graph`` objects (and eager steps, left alone). Returns what was done, and
    the new executable of each graph piece (by its index among the pieces) whose edges were rewritten:
    the recording launches it instead of CuPy's, and destroys it.
    """
    summary = PdlSummary()
    graphs = [step for step in steps if hasattr(step, "graphExec")]
    if setting != "auto":
        summary.off_reason = f"pdl={setting!r} in the config"
        return summary, {}
    if not graphs:
        return summary, {}
    drv = bindings()
    if drv is None or not hasattr(drv, "CUgraphEdgeData"):
        summary.off_reason = "cuda-bindings with graph edge data (CUDA 12.3+) is not installed"
        _log(label, summary)
        return summary, {}
    replaced: dict[int, int] = {}
    try:
        if _compute_capability(device_id) < _MIN_ARCH:
            summary.off_reason = "the GPU has no programmatic dependent launch (needs sm_90 or newer)"
        else:
            replaced = _Rewriter(drv, device_id, summary, KernelFinder(device_id, reachable)).run(graphs, tops, bodies)
    except Exception as err:  # never cost the capture: keep CuPy's executables
        summary = PdlSummary(off_reason=f"rewrite failed ({type(err).__name__}: {err})")
    _log(label, summary)
    return summary, replaced


def _compute_capability(device_id: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device_id).compute_capability)


def _log(label: str, summary: PdlSummary) -> None:
    if not logger.isEnabledFor(logging.DEBUG):
        return
    if summary.off_reason:
        logger.debug("cupygraph: %s: no programmatic edges: %s", label, summary.off_reason)
        return
    logger.debug("cupygraph: %s: %d edge(s) made programmatic, %d kept plain %s", label, summary.converted,
                 summary.kept_total, dict(summary.kept))
    for name, why in summary.not_converted.items():
        logger.debug("cupygraph: %s: kernel %r keeps plain edges: %s", label, name, why)


class _Rewriter:
    def __init__(self, drv: Any, device_id: int, summary: PdlSummary, finder: KernelFinder):
        self.drv, self.device_id, self.summary, self.finder = drv, device_id, summary, finder
        self._verdicts: dict[int, Node] = {}
        self._handles: dict[Hashable, Any] = {}

    def run(self, graphs: list[Any], tops: dict[int, GraphSnapshot], bodies: Sequence[GraphSnapshot]) -> dict[int, int]:
        """The new executable of each of ``graphs`` (by index) once their edges are rewritten, or {}."""
        top_handles = [int(g.graph) for g in graphs]
        snapshots = [tops[h] for h in top_handles if h in tops] + list(bodies)
        if len(snapshots) < len(top_handles) + len(bodies):
            raise RuntimeError("a graph of the recording was not read")
        described = {snapshot.handle: self.describe(snapshot) for snapshot in snapshots}
        # Widest choice first; narrower ones if the driver refuses to instantiate it.
        tiers = [
            {h: choose_edges(d) for h, d in described.items()},
            {h: choose_edges(d) for h, d in described.items() if h in top_handles},
            {h: choose_edges(d, sole_dependency_only=True) for h, d in described.items() if h in top_handles},
        ]
        refused = False
        tried: list[dict[int, EdgeChoice]] = []
        for choices in tiers:
            if not any(choice.convert for choice in choices.values()) or choices in tried:
                continue
            tried.append(choices)
            execs = self.try_tier(choices, graphs)
            if execs is None:
                refused = True
                continue
            for handle, description in described.items():
                self.summary.add(choices.get(handle) or _unconverted(description))
            return {i: int(handle) for i, handle in enumerate(execs)}
        for description in described.values():
            self.summary.add(_unconverted(description))
        if refused:
            self.summary.off_reason = "the driver refused to instantiate the graph with programmatic edges"
        return {}

    # -- reading -----------------------------------------------------------------------------------

    def describe(self, snapshot: GraphSnapshot) -> GraphDescription:
        if snapshot.problem is not None or snapshot.edges_problem is not None:
            raise RuntimeError(snapshot.problem or snapshot.edges_problem)
        nodes: dict[Hashable, Node] = {}
        for node in snapshot.nodes:
            self._handles[node.key] = node.handle
            nodes[node.key] = self._node(node)
        edges = tuple(Edge(e.src, e.dst, e.plain) for e in snapshot.edges)
        return GraphDescription(nodes, edges)

    def _node(self, node: SnapshotNode) -> Node:
        if node.kind != "kernel":
            return Node(node.kind)
        kernel = node.kernel
        if kernel is None:
            return Node("kernel", reason="not scanned: its launch parameters could not be read")
        if not kernel.func:
            return Node("kernel", kernel.name, reason="not scanned: a library kernel (CUkernel), whose code "
                                                      "cupygraph cannot read")
        if kernel.func not in self._verdicts:
            self._verdicts[kernel.func] = self._kernel(kernel.params.func, kernel.name)
        return self._verdicts[kernel.func]

    def _kernel(self, func: Any, name: str) -> Node:
        drv = self.drv
        got = ok(drv.cuFuncGetAttribute(drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PTX_VERSION, func))
        if not got:
            return Node("kernel", name, reason="not scanned: the driver did not give its PTX version")
        arch = int(got[0])
        if arch < _MIN_ARCH:  # no griddepcontrol before sm_90: known not to wait, without a scan
            return Node("kernel", name, reason=f"compiled for compute_{arch}, before griddepcontrol (sm_90)",
                        scanned=True)
        got = ok(drv.cuFuncGetModule(func))
        if not got:
            return Node("kernel", name, reason="not scanned: the driver did not name its module")
        handle = int(got[0])
        known = known_module(handle, self.device_id) or self.finder.find(handle, name)
        if known is None:
            return Node("kernel", name, reason=NOT_FOUND)
        verdict = known.verdict(name, arch)
        return Node("kernel", name, waits=verdict.waits, reason=verdict.reason, scanned=verdict.scanned)

    # -- rewriting ---------------------------------------------------------------------------------

    def _edit(self, graph: int, edges: Iterable[Edge], to_programmatic: bool) -> bool:
        edges = list(edges)
        if not edges:
            return True
        drv = self.drv
        programmatic = drv.CUgraphEdgeData()
        programmatic.type = drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        programmatic.from_port = getattr(drv, "CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC", 1)
        plain = drv.CUgraphEdgeData()
        sources = [self._handles[e.src] for e in edges]
        targets = [self._handles[e.dst] for e in edges]
        old, new = (plain, programmatic) if to_programmatic else (programmatic, plain)
        handle = drv.CUgraph(graph)
        n = len(edges)
        if ok(drv.cuGraphRemoveDependencies(handle, sources, targets, [old] * n, n)) is None:
            return False
        if ok(drv.cuGraphAddDependencies(handle, sources, targets, [new] * n, n)) is None:
            # put the removed edges back as they were
            ok(drv.cuGraphAddDependencies(handle, sources, targets, [old] * n, n))
            return False
        return True

    def try_tier(self, choices: dict[int, EdgeChoice], graphs: list[Any]) -> Optional[list[Any]]:
        """New executables of ``graphs`` with ``choices`` applied, or None (edges restored)."""
        drv = self.drv
        done: list[int] = []
        execs: list[Any] = []
        fine = True
        for graph, choice in choices.items():
            if not self._edit(graph, choice.convert, True):
                fine = False
                break
            done.append(graph)
        if fine:
            for g in graphs:
                got = ok(drv.cuGraphInstantiate(drv.CUgraph(int(g.graph)), 0))
                if got is None:
                    fine = False
                    break
                execs.append(got[0])
        if fine:
            return execs
        for e in execs:
            drv.cuGraphExecDestroy(e)
        for graph in done:
            if not self._edit(graph, choices[graph].convert, False):
                raise RuntimeError("could not restore the plain edges of a graph")
        return None


def _unconverted(description: GraphDescription) -> EdgeChoice:
    """The choice for a graph left as it was: its would-be conversions counted as refused."""
    choice = choose_edges(description)
    kept = dict(choice.kept)
    if choice.convert:
        kept["driver_refused"] = len(choice.convert)
    return EdgeChoice((), kept, choice.not_converted)
