"""The address audit of a captured graph: which device addresses each node touches, and who owns them.

It reads the capture's one snapshot (``driver/snapshot.py``). Kernel nodes: a parameter laid out as
one of CuPy's structs gives only its pointer field (``pointer_offsets``); any other parameter gives
every 8-byte-aligned word as a candidate address. Memcpy and memset nodes give their addresses
exactly. Child graphs and conditional bodies count in place; memory-allocation nodes give memory
the graph owns. ``audit.classify`` then says who owns each address.

Nothing here may break a capture: a node the snapshot could not read is listed as unaudited, and
where cuda-bindings is missing the whole graph is.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ...logs import logger
from ...pytree import flatten
from ..cupy.fft import cached_plan_work_areas, is_cufft_kernel, plan_work_areas
from ..driver import allocation_of, bindings
from ..driver.snapshot import GraphSnapshot, Node, aligned_offsets
from ..holding import held_regions
from .audit import AuditReport, NodeRefs, Region, classify
from .foreign import Watch, describe_array, find_arrays, warn_foreign
from .library_kernels import library_of


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


class NodeAddresses:
    """The addresses the nodes of snapshots touch (``nodes``), the memory the graphs own, and what could
    not be read (``unaudited``); each graph counted once, wherever it is nested."""

    def __init__(self, snapshots: Sequence[GraphSnapshot],
                 library_of: Callable[[str], Optional[str]] = lambda name: None):
        self.library_of = library_of
        self.nodes: list[NodeRefs] = []
        self.owned: list[Region] = []
        self.unaudited: list[str] = []
        seen: set[int] = set()
        for top in snapshots:
            for graph in top.graphs():
                if id(graph) in seen:
                    continue
                seen.add(id(graph))
                if graph.problem is not None:
                    self.unaudited.append(graph.problem)
                for node in graph.nodes:
                    self._node(node)

    def _node(self, node: Node) -> None:
        if node.problem is not None and node.kernel is None:
            self.unaudited.append(node.problem)
            return
        if node.kernel is not None:
            self._kernel(node)
        elif node.copy is not None:
            self.nodes.append(NodeRefs("memcpy", "", node.copy.device_words, exact=True))
        elif node.fill is not None:
            self.nodes.append(NodeRefs("memset", "", (node.fill.dst,), exact=True))
        elif node.allocation is not None:
            ptr, size = node.allocation
            self.owned.append(Region(ptr, size, "graph", "memory the graph allocates"))

    def _kernel(self, node: Node) -> None:
        kernel = node.kernel
        assert kernel is not None  # (checked by the caller)
        name = kernel.name
        if kernel.problem is not None:
            self.unaudited.append(f"kernel {name!r} ({kernel.problem})")
            return
        words: list[int] = []
        if kernel.extra is not None:
            words.extend(_words(kernel.extra, 0))
        else:
            # A library's kernels take their own structs, whatever their shape: read them whole.
            read = _words if is_cufft_kernel(name) or self.library_of(name) else _pointer_words
            for offset, data in kernel.parameters():
                if len(data) >= 8:
                    words.extend(read(data, offset))
        self.nodes.append(NodeRefs("kernel", name, tuple(words), library=self.library_of(name)))


# -- the audit of one capture -----------------------------------------------------------------------


def audit_enabled() -> bool:
    """The audit runs on every capture unless ``CUPYGRAPH_AUDIT=0``."""
    return os.environ.get("CUPYGRAPH_AUDIT", "1") != "0"


def audit_capture(backend: Any, recording: Any, snapshots: Sequence[GraphSnapshot], fn: Any, args: Sequence[Any],
                  kwargs: dict[str, Any], unread: Optional[str] = None) -> None:
    """Account for every address the graphs of ``snapshots`` (of ``recording``) touch; warn once per family
    about memory the entry does not own, and watch the named arrays behind it (checked by debug mode).
    ``unread``: why the graphs could not be read; then nothing is audited, and no report says "clean"."""
    if not audit_enabled() or bindings() is None:
        return
    if unread is not None:
        logger.debug("cupygraph: the graph of %s was not audited (it could not be read: %s)",
                     getattr(fn, "__name__", fn), unread)
        return
    try:
        report, watches = _audit(backend, recording, snapshots, fn, args, kwargs)
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


def _audit(backend: Any, recording: Any, snapshots: Sequence[GraphSnapshot], fn: Any, args: Sequence[Any],
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
    walker = NodeAddresses(snapshots, library_of if recording.held else lambda name: None)
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
