"""Read the structure of a CuPy recording's real CUDA graphs with cuda-bindings (topology snapshots).

What ``diagnostics.topology`` compares: per recording, the pieces and graph breaks, and over all
their nodes (child graphs and conditional bodies included, in place): counts by node kind,
kernel function names in ``cuGraphGetNodes`` order (the order stream capture created them), the
memcpy and memset nodes (direction and bytes) and the conditional nodes (their type).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..errors import CupyGraphError
from .cupy_audit import _driver, _ok

_MAX_DEPTH = 8  # nested child graphs / conditional bodies
_NODE_PREFIX = "CU_GRAPH_NODE_TYPE_"


def recording_topology(recording: Any) -> dict[str, Any]:
    """The description of ``recording`` (a ``CupyRecording``): plain data, kernel names one per launch."""
    drv = _driver()
    if drv is None:
        raise CupyGraphError("reading a graph's nodes needs cuda-bindings (pip install cuda-bindings)")
    walker = TopologyWalker(drv)
    pieces, breaks = 0, []
    for step in getattr(recording, "steps", []):
        graph = getattr(step, "graph", None)
        if graph is None:  # an eager step between pieces: a graph break
            fn = getattr(step, "fn", None)
            breaks.append(getattr(fn, "__name__", type(fn).__name__))
            continue
        pieces += 1
        walker.walk(int(graph))
    return {
        "pieces": pieces,
        "graph_breaks": breaks,
        "nodes_by_kind": dict(sorted(walker.kinds.items())),
        "kernels": walker.kernels,
        "memcpy": walker.memcpy,
        "memset": walker.memset,
        "conditional": walker.conditional,
    }


class TopologyWalker:
    """Collects node kinds, kernel names, copies, memsets and conditional nodes of graphs."""

    def __init__(self, drv: Any):
        self.drv = drv
        self.kinds: Counter[str] = Counter()
        self.kernels: list[str] = []
        self.memcpy: list[str] = []
        self.memset: list[str] = []
        self.conditional: list[str] = []
        self._names: dict[int, str] = {}

    def walk(self, graph: int, depth: int = 0) -> None:
        drv = self.drv
        handle = drv.CUgraph(int(graph))
        got = _ok(drv.cuGraphGetNodes(handle, 0))
        count = int(got[-1]) if got is not None else -1
        if count > 0:
            got = _ok(drv.cuGraphGetNodes(handle, count))
        if got is None:
            raise CupyGraphError(f"cuGraphGetNodes failed on graph 0x{int(graph):x}: its topology cannot be read")
        for node in list(got[0])[:count] if count > 0 else []:
            self._node(node, depth)

    def _node(self, node: Any, depth: int) -> None:
        drv = self.drv
        got = _ok(drv.cuGraphNodeGetType(node))
        if got is None:
            self.kinds["unknown"] += 1
            return
        kind = got[0]
        types = drv.CUgraphNodeType
        name = _enum_name(kind, _NODE_PREFIX)
        self.kinds["child_graph" if name == "graph" else name] += 1
        if kind == types.CU_GRAPH_NODE_TYPE_KERNEL:
            self.kernels.append(self._kernel_name(node))
        elif kind == types.CU_GRAPH_NODE_TYPE_MEMCPY:
            self.memcpy.append(self._copy(node))
        elif kind == types.CU_GRAPH_NODE_TYPE_MEMSET:
            got = _ok(drv.cuGraphMemsetNodeGetParams(node))
            p = got[0] if got else None
            self.memset.append("unreadable" if p is None else
                               f"{int(p.elementSize) * int(p.width) * max(1, int(p.height)):,} bytes")
        elif kind == types.CU_GRAPH_NODE_TYPE_GRAPH and depth < _MAX_DEPTH:
            got = _ok(drv.cuGraphChildGraphNodeGetGraph(node))
            if got is not None:
                self.walk(int(got[0]), depth + 1)
        elif kind == getattr(types, "CU_GRAPH_NODE_TYPE_CONDITIONAL", None):
            self._conditional(node, depth)

    def _conditional(self, node: Any, depth: int) -> None:
        drv = self.drv
        got = _ok(drv.cuGraphNodeGetParams(node)) if hasattr(drv, "cuGraphNodeGetParams") else None
        if got is None:
            self.conditional.append("unreadable")
            return
        params = got[0].conditional
        size = int(params.size)
        self.conditional.append(f"{_enum_name(params.type, 'CU_GRAPH_COND_TYPE_')}, {size} "
                                f"{'body' if size == 1 else 'bodies'}")
        if depth < _MAX_DEPTH:
            for body in list(params.phGraph_out)[:size]:
                self.walk(int(body), depth + 1)

    def _copy(self, node: Any) -> str:
        got = _ok(self.drv.cuGraphMemcpyNodeGetParams(node))
        if got is None:
            return "unreadable"
        p = got[0]
        nbytes = int(p.WidthInBytes) * max(1, int(p.Height)) * max(1, int(p.Depth))
        src = _enum_name(p.srcMemoryType, "CU_MEMORYTYPE_")
        dst = _enum_name(p.dstMemoryType, "CU_MEMORYTYPE_")
        return f"{src} to {dst}, {nbytes:,} bytes"

    def _kernel_name(self, node: Any) -> str:
        drv = self.drv
        got = _ok(drv.cuGraphKernelNodeGetParams(node))
        if got is None:
            return "<unreadable kernel>"
        p = got[0]
        func, kern = int(p.func), int(getattr(p, "kern", 0) or 0)
        ident = func or kern
        name = self._names.get(ident)
        if name is None:
            named = None
            if func and hasattr(drv, "cuFuncGetName"):
                named = _ok(drv.cuFuncGetName(p.func))
            elif kern and hasattr(drv, "cuKernelGetName"):
                named = _ok(drv.cuKernelGetName(p.kern))
            raw = named[0] if named else b""
            name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")
            name = name or "<unnamed kernel>"
            self._names[ident] = name
        return name


def _enum_name(value: Any, prefix: str) -> str:
    """``CU_MEMORYTYPE_DEVICE`` as ``device``; an unknown value as its number."""
    name = getattr(value, "name", None) or str(value)
    name = name.rsplit(".", 1)[-1]
    return name[len(prefix):].lower() if name.startswith(prefix) else name.lower()
