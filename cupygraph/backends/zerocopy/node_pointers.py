"""Zero-copy on the GPU: which kernel-node words point into each buffer, so a call can re-point them.

After capture (``find_node_pointers``), every node of the capture's snapshot (``driver/snapshot.py``)
is looked at: kernel parameters at their ``cuFuncGetParamInfo`` layout (as the address audit reads
them), memcpy and memset addresses exactly. A static input buffer, or an output the capture allocated, may be rebound
when every pointer into its allocation lies inside its bytes and belongs to a kernel node
(``binding`` states the rules). Each such node gets, once, a private copy of its parameter block
and a ``CUDA_KERNEL_NODE_PARAMS`` that points at it; a call only rewrites the pointer words and
hands the block to ``cuGraphExecKernelNodeSetParams`` (through ctypes, the cheapest call from
Python), and only when the address differs from the one the executable already holds. The
update affects later launches only, never one already enqueued.

The caller holds the family lock around ``CupyBinder.bind`` and the launch that follows.
"""

from __future__ import annotations

import ctypes
import struct
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

import cupy

from ...logs import logger
from ...pytree import flatten
from ..cupy.recording import is_piece
from ..driver import set_params_function
from ..driver.snapshot import GraphSnapshot, Kernel, aligned_offsets
from .binding import BufferFacts, CopyReason

ALIGNMENT = 256
"""What a caller's address must be aligned to (CuPy's pool hands out 512-byte aligned blocks, and a
kernel captured on a static buffer may use wide loads)."""

_SMALLEST_ADDRESS = 1 << 16


class _KernelNodeParams(ctypes.Structure):
    # CUDA_KERNEL_NODE_PARAMS_v2 (the same layout as v3).
    _fields_ = [
        ("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p),
    ]


class KernelNode:
    """A kernel node of a graph piece with its own copy of its parameters, ready to be set again on any
    executable of that piece (node handles belong to the graph)."""

    __slots__ = ("_keep", "block", "handle", "piece", "ref")

    def __init__(self, piece: int, handle: int, kernel: Kernel):
        layout, p = kernel.layout or (), kernel.params
        self.block = ctypes.create_string_buffer(kernel.data, max(len(kernel.data), 8))
        base = ctypes.addressof(self.block)
        pointers = (ctypes.c_void_p * max(len(layout), 1))(*[base + offset for offset, _ in layout])
        params = _KernelNodeParams(
            int(p.func) or None, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
            p.sharedMemBytes, ctypes.addressof(pointers), None,
            int(getattr(p, "kern", 0) or 0) or None, int(getattr(p, "ctx", 0) or 0) or None,
        )
        self._keep = (pointers, params)
        self.piece = piece
        """The index of its graph among the recording's pieces."""
        self.handle = ctypes.c_void_p(handle)
        self.ref = ctypes.byref(params)

    def cell(self, offset: int) -> ctypes.c_uint64:
        """The 8-byte parameter word at ``offset`` of the block, as a settable ctypes object."""
        return ctypes.c_uint64.from_address(ctypes.addressof(self.block) + offset)


class _Scan:
    """Every pointer-like word of one graph: (word, node or None when the node cannot be re-pointed,
    offset in the node's block, kind)."""

    def __init__(self) -> None:
        self.words: list[tuple[int, Optional[KernelNode], int, str]] = []
        self.problem: Optional[CopyReason] = None


_HARMLESS = frozenset({"empty", "wait_event", "event_record", "mem_alloc", "mem_free"})
"""Node kinds that touch no buffer a call could re-point."""


def _scan(snapshot: GraphSnapshot, piece: int) -> _Scan:
    """The pointer-like words of one top graph's nodes; nested graphs make it unsupported (their
    nodes belong to no executable a call could set)."""
    scan = _Scan()
    if set_params_function() is None:
        scan.problem = CopyReason.NO_DRIVER
        return scan
    if snapshot.problem is not None:
        scan.problem = CopyReason.UNSUPPORTED_NODE
        return scan
    for node in snapshot.nodes:
        if node.kind == "kernel" and node.kernel is not None and node.kernel.problem is None:
            _kernel_words(scan, piece, node.handle, node.kernel)
        elif node.kind == "memcpy" and node.copy is not None:
            scan.words.append((node.copy.src, None, 0, "memcpy"))
            scan.words.append((node.copy.dst, None, 0, "memcpy"))
        elif node.kind == "memset" and node.fill is not None:
            scan.words.append((node.fill.dst, None, 0, "memset"))
        elif node.kind not in _HARMLESS or node.problem is not None:  # child graphs, conditionals, host callbacks
            scan.problem = CopyReason.UNSUPPORTED_NODE
            return scan
    return scan


def _kernel_words(scan: _Scan, piece: int, handle: Any, kernel: Kernel) -> None:
    if kernel.extra is not None:
        for word in kernel.words():
            scan.words.append((word, None, 0, "kernel (extra)"))
        return
    if not kernel.layout:
        return  # a kernel without parameters
    made = KernelNode(piece, int(handle), kernel)
    data = kernel.data
    for offset, size in kernel.layout:
        # Every aligned word, not the audit's reading of CuPy's structs (``cupy_audit.pointer_offsets``):
        # a user's struct can look like a CIndexer and still hold pointers. A word missed here would
        # leave a node on the static buffer while the call binds the caller's array; a garbage word
        # taken for a pointer only costs a re-point of a word nobody reads, or a copy.
        for at in aligned_offsets(size, offset):
            at += offset
            word = struct.unpack_from("<Q", data, at)[0]
            if word >= _SMALLEST_ADDRESS:
                scan.words.append((word, made, at, "kernel"))


class _Region:
    """Where a buffer lies ([lo, hi)) inside its allocation ([alo, ahi))."""

    __slots__ = ("ahi", "alo", "hi", "lo")

    def __init__(self, array: Any):
        self.lo = int(array.data.ptr)
        self.hi = self.lo + int(array.nbytes)
        memory = array.data.mem
        self.alo = int(memory.ptr)
        self.ahi = self.alo + int(memory.size)


def _facts(region: _Region, scan: _Scan, starts: set[int]) -> BufferFacts:
    """Whether the graph's pointers into ``region``'s allocation can all be re-pointed, and how.

    A pointer just past the buffer's end is taken as the next allocation's when one starts there
    (CuPy's pool packs blocks back to back; its kernels take a base pointer and a size, never an
    end pointer); anywhere else it could be an end pointer of this buffer, so the buffer is copied.
    """
    if scan.problem is not None:
        return BufferFacts(scan.problem)
    patches: list[tuple[KernelNode, int, int]] = []
    for word, node, at, kind in scan.words:
        if region.lo <= word < region.hi:
            if node is None:
                copying = kind in ("memcpy", "memset")
                return BufferFacts(CopyReason.COPY_NODE if copying else CopyReason.UNSUPPORTED_NODE)
            patches.append((node, at, word - region.lo))
        elif word == region.hi and word not in starts:
            return BufferFacts(CopyReason.END_POINTER)
        elif region.alo <= word < region.ahi:
            return BufferFacts(CopyReason.STRADDLES)
    return BufferFacts(None, patches)


class CupyBindings:
    """What ``find_node_pointers`` found for one recording: facts per static buffer (by address) and per output."""

    def __init__(self, inputs: dict[int, BufferFacts], outputs: list[Optional[BufferFacts]], device_id: int):
        self.inputs, self.outputs, self.device_id = inputs, outputs, device_id


def _eager_arrays(steps: Sequence[Any]) -> Optional[list[_Region]]:
    """Where the eager steps between PIECEWISE pieces read and write (None: a step of unknown kind)."""
    regions: list[_Region] = []
    for step in steps:
        if is_piece(step):
            continue
        if not hasattr(step, "static_leaves") or not hasattr(step, "args"):
            return None
        values = [*step.args, *getattr(step, "kwargs", {}).values(), *step.static_leaves]
        leaves = [leaf for value in values for leaf in flatten(value, lambda v: isinstance(v, cupy.ndarray))[0]]
        regions.extend(_Region(leaf) for leaf in leaves if isinstance(leaf, cupy.ndarray) and leaf.nbytes)
    return regions


def _overlaps(region: _Region, others: Sequence[_Region]) -> bool:
    return any(o.lo < region.ahi and region.alo < o.hi for o in others)


def find_node_pointers(steps: Sequence[Any], snapshots: dict[int, GraphSnapshot], args: Sequence[Any],
                       leaves: Sequence[Any], extents: Sequence[tuple[int, int]], held: Sequence[Any],
                       device_id: int, relayed: frozenset[int] = frozenset()) -> Optional[CupyBindings]:
    """The rebinding facts of a finished capture (its steps final, before they are uploaded).

    ``snapshots``: the capture's snapshot of each graph step, by graph handle.
    ``args``: the arrays the function was called with (static buffers and constants); ``leaves``:
    its output leaves, before they are detached from their pool blocks; ``extents``: (address,
    bytes) of every allocation made while recording. In PIECEWISE every piece is read; a buffer an
    eager step between them touches is copied. ``relayed``: addresses of static buffers and outputs only
    the relay copy kernels touch (``backends/relay.py``): the library state a graph holds never saw
    them, so their words decide alone.
    """
    # Static buffers (in the family's pool) and constants (read by address, in the caller's memory).
    arrays = [a for a in args if isinstance(a, cupy.ndarray) and a.nbytes]
    outs: list[Optional[Any]] = [leaf if isinstance(leaf, cupy.ndarray) else None for leaf in leaves]
    scan = _Scan()
    eager = _eager_arrays(steps)
    library = BufferFacts(CopyReason.LIBRARY_STATE) if held else None
    if library is not None and not relayed:
        scan.problem = CopyReason.LIBRARY_STATE
    elif eager is None:
        scan.problem = CopyReason.UNSUPPORTED_NODE
    else:
        for piece, step in enumerate(s for s in steps if is_piece(s)):
            snapshot = snapshots.get(int(step.graph))
            part = _scan(snapshot, piece) if snapshot is not None else _Scan()
            if snapshot is None:
                part.problem = CopyReason.NO_DRIVER
            scan.words.extend(part.words)
            scan.problem = scan.problem or part.problem
    eager = eager or []
    out_regions = [_Region(leaf) if leaf is not None and leaf.nbytes else None for leaf in outs]
    buffers = [_Region(a) for a in arrays]
    starts = {p for p, _ in extents} | {b.alo for b in buffers} | {r.alo for r in out_regions if r is not None}
    inputs: dict[int, BufferFacts] = {}
    for buffer in buffers:
        if any(r is not None and buffer.alo <= r.lo < buffer.ahi for r in out_regions):
            inputs[buffer.lo] = BufferFacts(CopyReason.OUTPUT_ALIAS)
        elif _overlaps(buffer, eager):
            inputs[buffer.lo] = BufferFacts(CopyReason.PIECEWISE)
        elif library is not None and buffer.lo not in relayed:
            inputs[buffer.lo] = library
        else:
            inputs[buffer.lo] = _facts(buffer, scan, starts)
    outputs: list[Optional[BufferFacts]] = []
    shared = Counter(r.alo for r in out_regions if r is not None)
    for leaf, region in zip(outs, out_regions):
        if leaf is None or region is None:
            outputs.append(None)
        elif not leaf._c_contiguous:
            outputs.append(BufferFacts(CopyReason.STRIDES))
        elif shared[region.alo] > 1:
            outputs.append(BufferFacts(CopyReason.SHARED_ALLOCATION))
        elif _overlaps(region, eager):
            outputs.append(BufferFacts(CopyReason.PIECEWISE))
        elif not any(p == region.alo for p, _ in extents):
            outputs.append(BufferFacts(CopyReason.NOT_OWNED))
        elif any(p < region.ahi and region.alo < p + n and not (region.lo <= p and p + n <= region.hi)
                 for p, n in extents):
            outputs.append(BufferFacts(CopyReason.STRADDLES))
        elif library is not None and region.lo not in relayed:
            outputs.append(library)
        else:
            outputs.append(_facts(region, scan, starts))
    return CupyBindings(inputs, outputs, device_id)


def find_node_pointers_safely(steps: Sequence[Any], snapshots: dict[int, GraphSnapshot], args: Sequence[Any],
                              leaves: Sequence[Any], extents: Sequence[tuple[int, int]], held: Sequence[Any],
                              device_id: int, relayed: frozenset[int] = frozenset()) -> Optional[CupyBindings]:
    """``find_node_pointers``, or None (every argument copied) when it fails: it must never cost the capture."""
    if not steps:
        return None
    try:
        return find_node_pointers(steps, snapshots, args, leaves, extents, held, device_id, relayed)
    except Exception as err:
        logger.debug("cupygraph: no zero-copy binding for this graph: %s: %s", type(err).__name__, err)
        return None


def make_extent_recorder(malloc: Any, extents: list[tuple[int, int]]) -> Any:
    """An allocator that records (address, requested bytes) of every allocation it makes."""
    def recording(size: int) -> Any:
        memory = malloc(size)
        extents.append((int(memory.ptr), int(size)))
        return memory
    return recording
