"""Read a captured CUDA graph's nodes with cuda-bindings: which device addresses each touches.

Kernel nodes: the parameter layout comes from ``cuFuncGetParamInfo`` (CUDA 12.4+). A parameter
laid out as one of CuPy's structs gives only its pointer field (``_pointer_words``); any other
parameter gives every 8-byte-aligned word as a candidate address. Memcpy and memset nodes give
their addresses exactly.
Child graphs and the bodies of conditional nodes are walked too; memory-allocation nodes give
memory the graph owns. ``memaudit.classify`` then says who owns each address.

Nothing here may break a capture: a node that cannot be read is listed as unaudited, and where
cuda-bindings is missing the whole graph is.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..logs import logger
from ..pytree import flatten
from .audit import AuditReport, NodeRefs, Region, classify
from .cupy_fft import cached_plan_work_areas, is_cufft_kernel, plan_work_areas
from .foreign import Watch, describe_array, find_arrays, warn_foreign
from .holding import held_regions
from .library_kernels import library_of

_CU_LAUNCH_PARAM_END, _CU_LAUNCH_PARAM_BUFFER_POINTER, _CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
_MAX_DEPTH = 8  # nested child graphs / conditional bodies


@functools.cache
def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except Exception:  # ImportError, or bindings that cannot load the driver
        return None
    return driver if hasattr(driver, "cuGraphGetNodes") else None


def _ok(result: Any) -> Optional[tuple[Any, ...]]:
    """The values after the error code, or None when the call failed."""
    drv = _driver()
    parts = result if isinstance(result, tuple) else (result,)
    if parts[0] != drv.CUresult.CUDA_SUCCESS:
        return None
    return tuple(parts[1:])


def allocation_of(address: int) -> Optional[tuple[int, int]]:
    """(base, size) of the live device allocation holding ``address``, or None."""
    drv = _driver()
    got = _ok(drv.cuMemGetAddressRange(drv.CUdeviceptr(address)))
    if got is None:
        return None
    base, size = got
    return int(base), int(size)


def aligned_offsets(size: int, offset: int) -> range:
    """Where, in ``size`` bytes placed at ``offset`` of a parameter buffer, the 8-byte words start that
    sit 8-byte aligned in the buffer (where a device address can be)."""
    return range((-offset) % 8, size - 7, 8)


def _words(data: bytes, offset: int) -> tuple[int, ...]:
    """The 8-byte words of ``data`` that sit 8-byte aligned in the parameter buffer."""
    return tuple(struct.unpack_from("<Q", data, i)[0] for i in aligned_offsets(len(data), offset))


def _is_size_of(size: int, shape: Sequence[int]) -> bool:
    """Whether ``size`` is the element count of a non-empty array of ``shape``."""
    count = 1
    for extent in shape:
        if not 1 <= extent < _MAX_EXTENT:
            return False
        count *= extent
    return size == count


_MAX_EXTENT = 1 << 48


def _pointer_words(data: bytes, offset: int) -> tuple[int, ...]:
    """The words of one kernel parameter that may hold device addresses (``pointer_offsets``)."""
    return tuple(struct.unpack_from("<Q", data, at)[0] for at in pointer_offsets(data, offset))


def pointer_offsets(data: bytes, offset: int) -> tuple[int, ...]:
    """Where in one kernel parameter (its bytes ``data``, at ``offset`` of the parameter buffer) the
    words that may hold device addresses start.

    CuPy passes an ndarray as a ``CArray<T, ndim>`` (data pointer, size, shape[ndim],
    strides[ndim]) and an elementwise or reduction kernel's index space as a ``CIndexer<ndim>``
    (size, shape[ndim], index[ndim]), whose index words it leaves uninitialised: they hold whatever
    was in host memory, an old device address included. A parameter laid out as either, its size
    word the element count of its shape words, gives only its pointer (a CArray's first word, a
    CIndexer none). Anything else (a raw pointer, a scalar, a library's struct) gives every word.
    """
    count, rest = divmod(len(data), 8)
    if offset % 8 == 0 and rest == 0 and count >= 2:
        words = struct.unpack_from(f"<{count}q", data)
        ndim = count // 2
        if count % 2 and _is_size_of(words[0], words[1:1 + ndim]):
            return ()  # CIndexer: 1 + 2 * ndim words
        if not count % 2 and _is_size_of(words[1], words[2:1 + ndim]):
            return (0,)  # CArray: 2 + 2 * ndim words, the pointer first
    return tuple(aligned_offsets(len(data), offset))


class GraphWalker:
    """Describes the nodes of CUDA graphs; caches parameter layouts and names per function."""

    def __init__(self, library_of: Callable[[str], Optional[str]] = lambda name: None):
        self.drv = _driver()
        self.library_of = library_of
        self.nodes: list[NodeRefs] = []
        self.owned: list[Region] = []
        self.unaudited: list[str] = []
        self._layouts: dict[int, Optional[list[tuple[int, int]]]] = {}
        self._names: dict[int, str] = {}
        self._walked: set[int] = set()

    def walk(self, graph: int, depth: int = 0) -> None:
        """Describe every node of ``graph`` (and of the graphs nested in it), once per graph."""
        if not int(graph) or int(graph) in self._walked:
            return
        self._walked.add(int(graph))
        drv = self.drv
        handle = drv.CUgraph(int(graph))
        got = _ok(drv.cuGraphGetNodes(handle, 0))
        if got is None:
            self.unaudited.append("a graph whose nodes could not be listed")
            return
        count = int(got[-1])
        if count == 0:
            return
        got = _ok(drv.cuGraphGetNodes(handle, count))
        if got is None:
            self.unaudited.append("a graph whose nodes could not be listed")
            return
        for node in list(got[0])[:count]:
            try:
                self._node(node, depth)
            except Exception as err:  # one unreadable node must not hide the others
                self.unaudited.append(f"a node that could not be read ({type(err).__name__}: {err})")

    def _node(self, node: Any, depth: int) -> None:
        drv = self.drv
        got = _ok(drv.cuGraphNodeGetType(node))
        if got is None:
            self.unaudited.append("a node of unknown type")
            return
        kind = got[0]
        types = drv.CUgraphNodeType
        if kind == types.CU_GRAPH_NODE_TYPE_KERNEL:
            self._kernel(node)
        elif kind == types.CU_GRAPH_NODE_TYPE_MEMCPY:
            self._memcpy(node)
        elif kind == types.CU_GRAPH_NODE_TYPE_MEMSET:
            got = _ok(drv.cuGraphMemsetNodeGetParams(node))
            if got is None:
                self.unaudited.append("memset")
            else:
                self.nodes.append(NodeRefs("memset", "", (int(got[0].dst),), exact=True))
        elif kind == types.CU_GRAPH_NODE_TYPE_GRAPH:
            got = _ok(drv.cuGraphChildGraphNodeGetGraph(node))
            if got is None or depth >= _MAX_DEPTH:
                self.unaudited.append("child graph")
            else:
                self.walk(int(got[0]), depth + 1)
        elif kind == types.CU_GRAPH_NODE_TYPE_MEM_ALLOC:
            got = _ok(drv.cuGraphMemAllocNodeGetParams(node))
            if got is not None:
                params = got[0]
                self.owned.append(Region(int(params.dptr), int(params.bytesize), "graph", "memory the graph allocates"))
        elif kind == getattr(types, "CU_GRAPH_NODE_TYPE_CONDITIONAL", None):
            self._conditional(node, depth)

    def _conditional(self, node: Any, depth: int) -> None:
        got = _ok(self.drv.cuGraphNodeGetParams(node)) if hasattr(self.drv, "cuGraphNodeGetParams") else None
        if got is None or depth >= _MAX_DEPTH:
            self.unaudited.append("conditional node")
            return
        params = got[0].conditional
        for body in list(params.phGraph_out)[: int(params.size)]:
            self.walk(int(body), depth + 1)

    def _memcpy(self, node: Any) -> None:
        got = _ok(self.drv.cuGraphMemcpyNodeGetParams(node))
        if got is None:
            self.unaudited.append("memcpy")
            return
        p = got[0]
        device_like = (self.drv.CUmemorytype.CU_MEMORYTYPE_DEVICE, self.drv.CUmemorytype.CU_MEMORYTYPE_UNIFIED)
        words = []
        if p.srcMemoryType in device_like:
            words.append(int(p.srcDevice) + int(p.srcXInBytes) + int(p.srcY) * int(p.srcPitch))
        if p.dstMemoryType in device_like:
            words.append(int(p.dstDevice) + int(p.dstXInBytes) + int(p.dstY) * int(p.dstPitch))
        self.nodes.append(NodeRefs("memcpy", "", tuple(words), exact=True))

    def _kernel(self, node: Any) -> None:
        got = _ok(self.drv.cuGraphKernelNodeGetParams(node))
        if got is None:
            self.unaudited.append("kernel (parameters unreadable)")
            return
        p = got[0]
        func = int(p.func)
        kern = int(p.kern) if hasattr(p, "kern") else 0
        ident = func or kern
        name = self._name(p, ident)
        words: list[int] = []
        if int(p.kernelParams):
            layout = self._layout(p, ident)
            if layout is None:
                self.unaudited.append(f"kernel {name!r} (no parameter layout: needs CUDA 12.4+)")
                return
            pointers: Any = (ctypes.c_void_p * len(layout)).from_address(int(p.kernelParams)) if layout else []
            # A library's kernels take their own structs, whatever their shape: read them whole.
            read = _words if is_cufft_kernel(name) or self.library_of(name) else _pointer_words
            for (offset, size), pointer in zip(layout, pointers):
                if pointer and size >= 8:
                    words.extend(read(ctypes.string_at(pointer, size), offset))
        elif int(p.extra):
            buffer = self._extra_buffer(int(p.extra))
            if buffer is None:
                self.unaudited.append(f"kernel {name!r} (unreadable extra parameters)")
                return
            words.extend(_words(buffer, 0))
        self.nodes.append(NodeRefs("kernel", name, tuple(words), library=self.library_of(name)))

    def _name(self, p: Any, ident: int) -> str:
        name = self._names.get(ident)
        if name is None:
            drv = self.drv
            got = None
            if int(p.func) and hasattr(drv, "cuFuncGetName"):
                got = _ok(drv.cuFuncGetName(p.func))
            elif hasattr(p, "kern") and int(p.kern) and hasattr(drv, "cuKernelGetName"):
                got = _ok(drv.cuKernelGetName(p.kern))
            raw = got[0] if got else b""
            name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")
            self._names[ident] = name
        return name

    def param_layout(self, p: Any, ident: int) -> Optional[list[tuple[int, int]]]:
        """(offset, size) of each parameter of the kernel of node parameters ``p`` (cached per kernel)."""
        return self._layout(p, ident)

    def _layout(self, p: Any, ident: int) -> Optional[list[tuple[int, int]]]:
        if ident in self._layouts:
            return self._layouts[ident]
        drv = self.drv
        if int(p.func) and hasattr(drv, "cuFuncGetParamInfo"):
            query, handle = drv.cuFuncGetParamInfo, p.func
        elif hasattr(p, "kern") and int(p.kern) and hasattr(drv, "cuKernelGetParamInfo"):
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
        self._layouts[ident] = layout
        return layout

    @staticmethod
    def _extra_buffer(extra: int) -> Optional[bytes]:
        """The packed parameter buffer of a launch given through ``extra`` (key/value pairs)."""
        entries = (ctypes.c_void_p * 8).from_address(extra)
        buffer: Optional[int] = None
        size = 0
        for i in range(0, 8, 2):
            key = entries[i] or 0
            if key == _CU_LAUNCH_PARAM_END:
                break
            if key == _CU_LAUNCH_PARAM_BUFFER_POINTER:
                buffer = entries[i + 1]
            elif key == _CU_LAUNCH_PARAM_BUFFER_SIZE:
                where = entries[i + 1]
                size = ctypes.c_size_t.from_address(where).value if where else 0
        if not buffer or not size:
            return None
        return ctypes.string_at(buffer, size)


# -- the audit of one capture -----------------------------------------------------------------------


def audit_enabled() -> bool:
    """The audit runs on every capture unless ``CUPYGRAPH_AUDIT=0``."""
    return os.environ.get("CUPYGRAPH_AUDIT", "1") != "0"


def audit_capture(backend: Any, recording: Any, graphs: Sequence[int], fn: Any, args: Sequence[Any],
                  kwargs: dict[str, Any]) -> None:
    """Account for every address ``graphs`` (of ``recording``) touch; warn once per family about memory
    the entry does not own, and watch the named arrays behind it (checked by debug mode)."""
    if not audit_enabled() or _driver() is None:
        return
    try:
        report, watches = _audit(backend, recording, graphs, fn, args, kwargs)
    except Exception as err:  # an audit must never cost the capture
        logger.debug("cupygraph: could not audit the graph of %s: %s: %s", getattr(fn, "__name__", fn),
                     type(err).__name__, err)
        return
    recording.audit = report
    lines = []
    watched = []
    for ref in report.foreign():
        watch = watches.get(ref.label)
        if watch is not None:
            watched.append(watch)
        key = f"{ref.label} at 0x{ref.base:x}"  # a new array under the same name warns again
        if key not in backend.warned:
            backend.warned.add(key)
            lines.append(ref.describe())
    recording.watches = watched
    if lines:
        warn_foreign(fn, lines, "reads or writes memory it does not own")
    if report.unaudited:
        logger.debug("cupygraph: %d node(s) of the graph of %s were not audited: %s", len(report.unaudited),
                     getattr(fn, "__name__", fn), sorted(set(report.unaudited))[:5])


def _array_region(array: Any, owner: str, label: str) -> Optional[Region]:
    """The allocation behind ``array`` (a pool chunk: the whole of it lives as long as the array)."""
    memory = array.data.mem
    size = int(getattr(memory, "size", 0))
    return Region(int(memory.ptr), size, owner, label) if size else None


def _audit(backend: Any, recording: Any, graphs: Sequence[int], fn: Any, args: Sequence[Any],
           kwargs: dict[str, Any]) -> tuple[AuditReport, dict[str, Watch]]:
    import cupy

    is_array = backend.is_array
    regions: list[Region] = []
    arguments: set[int] = set()
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"keyword argument {k!r}", v)
                                                                  for k, v in kwargs.items()]
    for label, value in named:
        for leaf in flatten(value, is_array)[0]:
            if is_array(leaf):
                arguments.add(id(leaf))
                static = backend.owns(int(leaf.data.ptr))
                kind = "static buffer" if static else "captured by address"
                region = _array_region(leaf, "static" if static else "constant",
                                       f"{label} ({describe_array(leaf)}, {kind})")
                if region is not None:
                    regions.append(region)
    for ptr, size in plan_work_areas(recording.held):
        regions.append(Region(ptr, size, "held", "a cuFFT plan's work area, held by the graph"))
    for ptr, size, label in held_regions(recording.held):  # cuBLAS workspaces, RNG states
        regions.append(Region(ptr, size, "held", label))
    for ptr, size in backend.pool_regions():
        regions.append(Region(ptr, size, "pool", "the function's memory pool"))
    walker = GraphWalker(library_of if recording.held else lambda name: None)
    for graph in graphs:
        walker.walk(int(graph))
    regions.extend(walker.owned)
    report = classify(walker.nodes, regions, allocation_of, walker.unaudited)
    watches: dict[str, Watch] = {}
    if not report.foreign():
        return report, watches
    # Something foreign: name it where the function's closure, globals or static arguments lead to it.
    for found in find_arrays(fn, lambda v: isinstance(v, cupy.ndarray), args=args):
        if id(found.array) in arguments:
            continue
        label = f"{found.name} ({describe_array(found.array)})"
        region = _array_region(found.array, "foreign", label)
        if region is not None:
            regions.append(region)
            watches[label] = found.watch
    for ptr, size in cached_plan_work_areas():
        regions.append(Region(ptr, size, "foreign", "the work area of a cuFFT plan in CuPy's plan cache, freed "
                                                    "when the plan leaves the cache"))
    return classify(walker.nodes, regions, allocation_of, walker.unaudited), watches
