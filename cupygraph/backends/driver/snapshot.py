"""One reading of a captured CUDA graph: its nodes, their parameters and its edges, taken once.

After a capture, several features need to know what the graph holds: programmatic dependent launch
(node kinds, kernels, edges), zero-copy (which parameter words hold which buffer), the address audit
(every address a node touches) and the topology snapshots of diagnostics. Each used to ask the
driver itself; now the capture reads the graph once (``read_graphs``) and hands this snapshot to all
of them. Kernel parameters are copied out at reading time (``Kernel.data``), so the snapshot stays
valid whatever happens to the driver's own parameter buffers.

Nothing here may break a capture: a node or graph that cannot be read is kept with its ``problem``
(said in words), and every consumer decides what that costs it (the audit lists it as unaudited,
zero-copy copies instead of binding).
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

from . import bindings, ok

__all__ = ["Copy", "Edge", "Fill", "GraphSnapshot", "Kernel", "Node", "aligned_offsets", "read_graphs"]

MAX_DEPTH = 8
"""Nested child graphs and conditional bodies read below a top graph."""

_LAUNCH_PARAM_END, _LAUNCH_PARAM_BUFFER_POINTER, _LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
_NODE_PREFIX = "CU_GRAPH_NODE_TYPE_"


def aligned_offsets(size: int, offset: int) -> range:
    """Where, in ``size`` bytes placed at ``offset`` of a parameter buffer, the 8-byte words start that
    sit 8-byte aligned in the buffer (where a device address can be)."""
    return range((-offset) % 8, size - 7, 8)


def enum_name(value: Any, prefix: str) -> str:
    """``CU_MEMORYTYPE_DEVICE`` as ``device``; an unknown value as its number."""
    name = getattr(value, "name", None) or str(value)
    name = name.rsplit(".", 1)[-1]
    return name[len(prefix):].lower() if name.startswith(prefix) else name.lower()


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A kernel node's launch: its function, its parameters' layout and bytes."""

    name: str
    ident: int
    """The function's handle (``func``, or ``kern`` for a library's ``CUkernel``): one per kernel."""
    params: Any
    """The driver's ``CUDA_KERNEL_NODE_PARAMS`` as read (function, grid, block, ...), for re-pointing."""
    layout: Optional[tuple[tuple[int, int], ...]]
    """(offset, size) of each parameter; None where the driver cannot say (before CUDA 12.4)."""
    data: bytes = b""
    """The parameter block: each parameter's bytes at its offset (empty without ``kernelParams``)."""
    extra: Optional[bytes] = None
    """The packed parameter buffer of a launch given through ``extra``; None when there is none."""
    problem: Optional[str] = None

    @property
    def func(self) -> int:
        return int(self.params.func)

    def parameters(self) -> Iterator[tuple[int, bytes]]:
        """(offset, bytes) of each parameter, in order."""
        for offset, size in self.layout or ():
            yield offset, self.data[offset:offset + size]

    def words(self) -> tuple[int, ...]:
        """Every 8-byte word of every parameter that sits 8-byte aligned (or of the ``extra`` buffer)."""
        if self.extra is not None:
            return tuple(struct.unpack_from("<Q", self.extra, i)[0] for i in range(0, len(self.extra) - 7, 8))
        return tuple(struct.unpack_from("<Q", self.data, offset + at)[0]
                     for offset, size in self.layout or () for at in aligned_offsets(size, offset))


@dataclasses.dataclass(frozen=True)
class Copy:
    """A memcpy node: the address words of both sides and whether each is device memory."""

    src: int
    dst: int
    src_kind: str
    dst_kind: str
    nbytes: int

    @property
    def device_words(self) -> tuple[int, ...]:
        """The sides that are device (or unified) memory."""
        device = ("device", "unified")
        return tuple(w for w, kind in ((self.src, self.src_kind), (self.dst, self.dst_kind)) if kind in device)


@dataclasses.dataclass(frozen=True)
class Fill:
    """A memset node."""

    dst: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    type: int = 0
    from_port: int = 0
    to_port: int = 0

    @property
    def plain(self) -> bool:
        return self.type == 0 and self.from_port == 0 and self.to_port == 0


@dataclasses.dataclass
class Node:
    """One node: its kind, and what the reader could learn of it (``problem`` says what it could not)."""

    handle: Any
    """The driver's node handle (edits, re-pointing and edges use it)."""
    kind: str
    """``kernel``, ``memcpy``, ``memset``, ``graph`` (a child graph), ``conditional``, ``mem_alloc``, ...;
    ``unknown`` where not even the kind could be read."""
    kernel: Optional[Kernel] = None
    copy: Optional[Copy] = None
    fill: Optional[Fill] = None
    allocation: Optional[tuple[int, int]] = None
    """(address, bytes) of a memory-allocation node: memory the graph itself owns."""
    conditional: Optional[str] = None
    """A conditional node's type (``if``, ``while``, ``switch``)."""
    children: tuple[GraphSnapshot, ...] = ()
    """A child graph's graph, or a conditional node's bodies (nested no deeper than ``MAX_DEPTH``)."""
    problem: Optional[str] = None

    @property
    def key(self) -> int:
        return int(self.handle)


@dataclasses.dataclass
class GraphSnapshot:
    """One graph's nodes (in ``cuGraphGetNodes`` order: the order stream capture made them) and edges."""

    handle: int
    nodes: list[Node] = dataclasses.field(default_factory=list)
    edges: list[Edge] = dataclasses.field(default_factory=list)
    problem: Optional[str] = None
    """Set when the graph's nodes could not be listed (then ``nodes`` is empty)."""
    edges_problem: Optional[str] = None

    def walk(self) -> Iterator[tuple[Node, int]]:
        """(node, depth) for every node, the nested graphs' in place after their node."""
        yield from self._walk(0)

    def _walk(self, depth: int) -> Iterator[tuple[Node, int]]:
        for node in self.nodes:
            yield node, depth
            for child in node.children:
                yield from child._walk(depth + 1)

    def graphs(self) -> Iterator[GraphSnapshot]:
        """This graph and every graph nested in it, each once."""
        seen: set[int] = set()
        stack = [self]
        while stack:
            graph = stack.pop(0)
            if id(graph) in seen:
                continue
            seen.add(id(graph))
            yield graph
            stack.extend(child for node in graph.nodes for child in node.children)


def read_graphs(tops: Sequence[int], extra: Sequence[int] = (), drv: Any = None,
                known: Optional[Mapping[int, GraphSnapshot]] = None) -> list[GraphSnapshot]:
    """Snapshots of the graphs ``tops`` (with everything nested in them), then of the graphs in ``extra``
    that were not reached from them (conditional bodies recorded by control flow, where the driver
    could not list a conditional node's bodies). Each graph is read once, whatever refers to it; those
    in ``known`` (read before, by handle) are not read again."""
    reader = _Reader(drv if drv is not None else bindings(), known or {})
    snapshots = [reader.graph(int(g), 0) for g in tops]
    reached = {id(g) for top in snapshots for g in top.graphs()}
    for handle in extra:
        snapshot = reader.graph(int(handle), 0)
        if id(snapshot) not in reached:
            reached.add(id(snapshot))
            snapshots.append(snapshot)
    return snapshots


class _Reader:
    """Reads graphs with cuda-bindings; function names and parameter layouts cached per kernel."""

    def __init__(self, drv: Any, known: Mapping[int, GraphSnapshot]):
        self.drv = drv
        self._graphs: dict[int, GraphSnapshot] = dict(known)
        self._names: dict[int, str] = {}
        self._layouts: dict[int, Optional[tuple[tuple[int, int], ...]]] = {}

    def graph(self, handle: int, depth: int) -> GraphSnapshot:
        found = self._graphs.get(handle)
        if found is not None:
            return found
        drv = self.drv
        snapshot = self._graphs[handle] = GraphSnapshot(handle)
        graph = drv.CUgraph(handle)
        got, count = _listed(drv.cuGraphGetNodes, graph)
        if got is None:
            snapshot.problem = "a graph whose nodes could not be listed"
            return snapshot
        for node in list(got[0])[:count] if count else []:
            snapshot.nodes.append(self._node(node, depth))
        if hasattr(drv, "cuGraphGetEdges"):
            self._edges(snapshot, graph)
        return snapshot

    def _edges(self, snapshot: GraphSnapshot, graph: Any) -> None:
        got, count = _listed(self.drv.cuGraphGetEdges, graph)
        if got is None:
            snapshot.edges_problem = "cuGraphGetEdges failed"
            return
        if not count:
            return
        sources, targets = list(got[0])[:count], list(got[1])[:count]
        data = list(got[2])[:count] if len(got) > 3 else [None] * count
        for src, dst, datum in zip(sources, targets, data):
            if datum is None:
                snapshot.edges.append(Edge(int(src), int(dst)))
            else:
                snapshot.edges.append(Edge(int(src), int(dst), int(datum.type), int(datum.from_port),
                                           int(datum.to_port)))

    def _node(self, node: Any, depth: int) -> Node:
        drv = self.drv
        got = ok(drv.cuGraphNodeGetType(node))
        if got is None:
            return Node(node, "unknown", problem="a node of unknown type")
        kind = got[0]
        types = drv.CUgraphNodeType
        made = Node(node, enum_name(kind, _NODE_PREFIX))
        try:
            if kind == types.CU_GRAPH_NODE_TYPE_KERNEL:
                self._kernel(made)
            elif kind == types.CU_GRAPH_NODE_TYPE_MEMCPY:
                self._copy(made)
            elif kind == types.CU_GRAPH_NODE_TYPE_MEMSET:
                got = ok(drv.cuGraphMemsetNodeGetParams(node))
                if got is None:
                    made.problem = "memset"
                else:
                    p = got[0]
                    nbytes = (int(getattr(p, "elementSize", 0)) * int(getattr(p, "width", 0))
                              * max(1, int(getattr(p, "height", 1) or 1)))
                    made.fill = Fill(int(p.dst) if hasattr(p, "dst") else 0, nbytes)
            elif kind == types.CU_GRAPH_NODE_TYPE_GRAPH:
                got = ok(drv.cuGraphChildGraphNodeGetGraph(node))
                if got is None or depth >= MAX_DEPTH:
                    made.problem = "child graph"
                else:
                    made.children = (self.graph(int(got[0]), depth + 1),)
            elif kind == types.CU_GRAPH_NODE_TYPE_MEM_ALLOC:
                got = ok(drv.cuGraphMemAllocNodeGetParams(node))
                if got is not None:
                    made.allocation = (int(got[0].dptr), int(got[0].bytesize))
            elif kind == getattr(types, "CU_GRAPH_NODE_TYPE_CONDITIONAL", None):
                self._conditional(made, depth)
        except Exception as err:  # one unreadable node must not hide the others
            made.problem = f"a node that could not be read ({type(err).__name__}: {err})"
        return made

    def _conditional(self, made: Node, depth: int) -> None:
        drv = self.drv
        got = ok(drv.cuGraphNodeGetParams(made.handle)) if hasattr(drv, "cuGraphNodeGetParams") else None
        if got is None or depth >= MAX_DEPTH:
            made.problem = "conditional node"
            return
        params = got[0].conditional
        made.conditional = enum_name(getattr(params, "type", "unknown"), "CU_GRAPH_COND_TYPE_")
        size = int(params.size)
        made.children = tuple(self.graph(int(body), depth + 1) for body in list(params.phGraph_out)[:size])

    def _copy(self, made: Node) -> None:
        drv = self.drv
        got = ok(drv.cuGraphMemcpyNodeGetParams(made.handle))
        if got is None:
            made.problem = "memcpy"
            return
        p = got[0]

        def side(prefix: str) -> tuple[int, str]:
            word = (int(getattr(p, f"{prefix}Device", 0) or 0) + int(getattr(p, f"{prefix}XInBytes", 0) or 0)
                    + int(getattr(p, f"{prefix}Y", 0) or 0) * int(getattr(p, f"{prefix}Pitch", 0) or 0))
            return word, enum_name(getattr(p, f"{prefix}MemoryType", "unknown"), "CU_MEMORYTYPE_")

        (src, src_kind), (dst, dst_kind) = side("src"), side("dst")
        nbytes = (int(getattr(p, "WidthInBytes", 0) or 0) * max(1, int(getattr(p, "Height", 1) or 1))
                  * max(1, int(getattr(p, "Depth", 1) or 1)))
        made.copy = Copy(src, dst, src_kind, dst_kind, nbytes)

    def _kernel(self, made: Node) -> None:
        got = ok(self.drv.cuGraphKernelNodeGetParams(made.handle))
        if got is None:
            made.problem = "kernel (parameters unreadable)"
            return
        p = got[0]
        func, kern = int(p.func or 0), int(getattr(p, "kern", 0) or 0)
        ident = func or kern
        name = self._name(p, ident)
        if int(getattr(p, "kernelParams", 0) or 0):
            layout = self._layout(p, ident)
            if layout is None:
                made.kernel = Kernel(name, ident, p, None, problem="no parameter layout: needs CUDA 12.4+")
                return
            made.kernel = Kernel(name, ident, p, layout, _parameter_block(int(p.kernelParams), layout))
        elif int(getattr(p, "extra", 0) or 0):
            buffer = _extra_buffer(int(p.extra))
            made.kernel = Kernel(name, ident, p, (), extra=buffer,
                                 problem=None if buffer is not None else "unreadable extra parameters")
        else:  # a kernel without parameters
            made.kernel = Kernel(name, ident, p, ())

    def _name(self, p: Any, ident: int) -> str:
        name = self._names.get(ident)
        if name is None:
            drv = self.drv
            got = None
            if int(getattr(p, "func", 0) or 0) and hasattr(drv, "cuFuncGetName"):
                got = ok(drv.cuFuncGetName(p.func))
            elif int(getattr(p, "kern", 0) or 0) and hasattr(drv, "cuKernelGetName"):
                got = ok(drv.cuKernelGetName(p.kern))
            raw = got[0] if got else b""
            name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")
            self._names[ident] = name
        return name

    def _layout(self, p: Any, ident: int) -> Optional[tuple[tuple[int, int], ...]]:
        if ident in self._layouts:
            return self._layouts[ident]
        drv = self.drv
        if int(getattr(p, "func", 0) or 0) and hasattr(drv, "cuFuncGetParamInfo"):
            query, handle = drv.cuFuncGetParamInfo, p.func
        elif int(getattr(p, "kern", 0) or 0) and hasattr(drv, "cuKernelGetParamInfo"):
            query, handle = drv.cuKernelGetParamInfo, p.kern
        else:
            self._layouts[ident] = None
            return None
        layout: Optional[list[tuple[int, int]]] = []
        while layout is not None and len(layout) < 4096:
            result = query(handle, len(layout))
            if result[0] == drv.CUresult.CUDA_SUCCESS:
                layout.append((int(result[1]), int(result[2])))
            elif result[0] == drv.CUresult.CUDA_ERROR_INVALID_VALUE:
                break  # past the last parameter
            else:  # not supported by this driver
                layout = None
        found = self._layouts[ident] = tuple(layout) if layout is not None else None
        return found


def _parameter_block(kernel_params: int, layout: Sequence[tuple[int, int]]) -> bytes:
    """The parameters ``kernelParams`` points at (one pointer per parameter), each at its offset."""
    total = max((offset + size for offset, size in layout), default=0)
    block = bytearray(total)
    if layout:
        pointers = (ctypes.c_void_p * len(layout)).from_address(kernel_params)
        for (offset, size), pointer in zip(layout, pointers):
            if pointer and size:
                block[offset:offset + size] = ctypes.string_at(pointer, size)
    return bytes(block)


def _extra_buffer(extra: int) -> Optional[bytes]:
    """The packed parameter buffer of a launch given through ``extra`` (key/value pairs)."""
    entries = (ctypes.c_void_p * 8).from_address(extra)
    buffer: Optional[int] = None
    size = 0
    for i in range(0, 8, 2):
        key = entries[i] or 0
        if key == _LAUNCH_PARAM_END:
            break
        if key == _LAUNCH_PARAM_BUFFER_POINTER:
            buffer = entries[i + 1]
        elif key == _LAUNCH_PARAM_BUFFER_SIZE:
            where = entries[i + 1]
            size = ctypes.c_size_t.from_address(where).value if where else 0
    return ctypes.string_at(buffer, size) if buffer and size else None


def _listed(call: Any, graph: Any) -> tuple[Any, int]:
    """(result, count) of a driver list call asked for its count, then that many; (None, 0) if it failed."""
    got = ok(call(graph, 0))
    count = int(got[-1]) if got is not None else 0
    if got is not None and count:
        got = ok(call(graph, count))
    return got, count if got is not None else 0
