"""Account for every device address a captured graph touches: who owns the memory behind it.

Pure Python on purpose: the GPU backend describes the graph's nodes (``NodeRefs``, read with
cuda-bindings in ``backends/guards/cupy_audit.py``) and the memory it knows (``Region``); ``classify``
sorts every address into one owner. Recorded node descriptions make it testable without a GPU.

Owners, in the order they are tried (the first region holding an address wins):

* ``static``   — a static buffer of the entry (an argument copied into the family's pool);
* ``constant`` — a constant argument, captured by address (its address is part of the key);
* ``held``     — memory the recording holds for its lifetime (cuFFT plans and work areas);
* ``graph``    — memory the graph allocates itself (memory-allocation nodes);
* ``pool``     — the family's own memory pool (intermediates, outputs, scratch);
* ``foreign``  — an array found in the function's closure or globals (named, watched);
* ``unknown``  — another live device allocation: foreign, owner not found.

Kernel parameters are read as 8-byte words (only the pointer fields of CuPy's ``CArray`` and
``CIndexer``, whose other words can be uninitialised), so a word that merely looks like an address
is only counted when it falls inside a region or a live device allocation.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Optional

OWNERS = ("static", "constant", "held", "graph", "pool", "foreign", "unknown")
"""Every owner ``classify`` reports, in precedence order."""

FOREIGN_OWNERS = frozenset({"foreign", "unknown"})

_MAX_NODES_NAMED = 3
# User-space device addresses lie well inside 48 bits; smaller words are sizes, strides, flags.
_SMALLEST_ADDRESS = 1 << 16
_ADDRESS_LIMIT = 1 << 57


@dataclasses.dataclass(frozen=True)
class NodeRefs:
    """What one graph node may touch.

    ``words`` are candidate addresses: the 8-byte words of a kernel's parameters, or the exact
    source/destination addresses of a copy or memset (``exact``). ``library`` names the library
    whose plan the recording holds when the node is one of that library's kernels: its other
    addresses are that library's internal memory, held with the plan.
    """

    kind: str
    name: str
    words: tuple[int, ...]
    exact: bool = False
    library: Optional[str] = None

    def describe(self) -> str:
        return f"{self.kind} {self.name!r}" if self.name else self.kind


@dataclasses.dataclass(frozen=True)
class Region:
    """A known range of device memory and who owns it."""

    start: int
    size: int
    owner: str
    label: str

    def __post_init__(self) -> None:
        if self.owner not in OWNERS[:-1]:
            raise ValueError(f"region owner must be one of {', '.join(OWNERS[:-1])}, got {self.owner!r}")

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclasses.dataclass
class Reference:
    """The graph touches memory of one owner (one region, or one unknown allocation)."""

    owner: str
    label: str
    address: int
    """The first address seen in it."""
    base: int = 0
    """Where the region (or the allocation) starts: with ``label``, what it is."""
    nodes: list[str] = dataclasses.field(default_factory=list)
    """Up to three nodes that touch it, for messages."""
    allocation: Optional[tuple[int, int]] = None
    """(base, size) of the device allocation, for unknown owners."""

    def describe(self) -> str:
        where = f"0x{self.address:x}"
        if self.allocation is not None:
            where += f" (in a {self.allocation[1]}-byte allocation at 0x{self.allocation[0]:x})"
        return f"{where}: {self.label}, used by {', '.join(self.nodes)}"


@dataclasses.dataclass
class AuditReport:
    """Every owner a graph's nodes touch, and the nodes that could not be read."""

    references: list[Reference]
    nodes: int
    unaudited: list[str]

    def foreign(self) -> list[Reference]:
        """References to memory the entry neither owns nor holds."""
        return [r for r in self.references if r.owner in FOREIGN_OWNERS]

    def owners(self) -> dict[str, int]:
        """How many distinct regions (or allocations) of each owner the graph touches."""
        counts = dict.fromkeys(OWNERS, 0)
        for ref in self.references:
            counts[ref.owner] += 1
        return {k: v for k, v in counts.items() if v}


class _RegionIndex:
    """Regions of one owner: which holds an address, in O(log n) (regions may overlap)."""

    def __init__(self, regions: Sequence[Region]):
        self.regions = sorted(regions, key=lambda r: r.start)
        self.starts = [r.start for r in self.regions]
        self.reach: list[int] = []  # the furthest end among regions[:i+1]: stop walking back below it
        furthest = 0
        for region in self.regions:
            furthest = max(furthest, region.end)
            self.reach.append(furthest)

    def find(self, address: int) -> Optional[Region]:
        i = bisect.bisect_right(self.starts, address) - 1
        while i >= 0 and self.reach[i] > address:
            region = self.regions[i]
            if region.start <= address < region.end:
                return region
            i -= 1
        return None


def _find(indexes: list[tuple[str, _RegionIndex]], address: int) -> Optional[Region]:
    for _, index in indexes:
        region = index.find(address)
        if region is not None:
            return region
    return None


def classify(
    nodes: Iterable[NodeRefs],
    regions: Iterable[Region],
    allocation_of: Callable[[int], Optional[tuple[int, int]]],
    unaudited: Sequence[str] = (),
) -> AuditReport:
    """Sort every address the nodes touch by owner.

    ``allocation_of(address)`` returns the (base, size) of the live device allocation holding
    ``address``, or None when it is not device memory (on the GPU: ``cuMemGetAddressRange``).
    It is asked only about words no region holds, once per distinct word.
    """
    by_owner: dict[str, list[Region]] = {owner: [] for owner in OWNERS[:-1]}
    for known in regions:
        by_owner[known.owner].append(known)
    indexes = [(owner, _RegionIndex(found)) for owner, found in by_owner.items() if found]
    lowest = min((index.starts[0] for _, index in indexes), default=_ADDRESS_LIMIT)
    highest = max((index.reach[-1] for _, index in indexes), default=0)
    references: dict[tuple[str, int, str], Reference] = {}
    allocations: dict[int, Optional[tuple[int, int]]] = {}
    count = 0

    def note(owner: str, base: int, label: str, address: int, node: NodeRefs,
             allocation: Optional[tuple[int, int]] = None) -> None:
        ref = references.get((owner, base, label))
        if ref is None:
            ref = references[(owner, base, label)] = Reference(owner, label, address, base, allocation=allocation)
        name = node.describe()
        if len(ref.nodes) < _MAX_NODES_NAMED and name not in ref.nodes:
            ref.nodes.append(name)

    for node in nodes:
        count += 1
        for word in node.words:
            if not node.exact and not _SMALLEST_ADDRESS <= word < _ADDRESS_LIMIT:
                continue
            region = _find(indexes, word) if lowest <= word < highest else None
            if region is not None:
                note(region.owner, region.start, region.label, word, node)
                continue
            if word not in allocations:
                allocations[word] = allocation_of(word)
            allocation = allocations[word]
            if allocation is None:
                continue  # not device memory: a size, a stride, a scalar
            if node.library is not None:
                label = f"{node.library} internal memory, held with its plan or handle"
                note("held", allocation[0], label, word, node, allocation)
            else:
                note("unknown", allocation[0], "device memory of unknown owner", word, node, allocation)
    ordered = sorted(references.values(), key=lambda r: (OWNERS.index(r.owner), r.address))
    return AuditReport(ordered, count, list(unaudited))
