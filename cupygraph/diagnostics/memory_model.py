"""What capture sizes cost in memory, for ``plan_capture_sizes(memory_limit=...)`` and ``cupygraph plan-sizes
--memory-limit``: measured where the sizes were captured, fitted where they were not, flat where nothing was.

A key's measured cost is what its capture took (``stats().graph_costs``: pool bytes plus, where measured,
the executable's; ``cache.stats.GraphCost`` says what each is). A size costs the sum over the keys captured
at it (its modes and signatures), and, over several functions, the sum of each function's cost. For a size
a function did not capture, its cost is a least-squares line in the batch size through the sizes it did
capture (one captured size: that size's cost), never below the cheapest it measured. Where nothing was
measured, each graph costs the flat ``bytes_per_graph``.

A family's graphs share its pool, so a key's measured cost is what it added to what the family held then:
``warmup`` captures the largest size first, and the smaller keys, which reuse its blocks, take close to
nothing. So a list's largest size, which pays for the blocks its other sizes reuse, is priced apart: at the
largest size measured, its measured cost; above it, the fitted line but no less than that key's cost scaled
by the rows (an upper bound for memory that is a fixed part plus a part per row, where that key took its
blocks fresh); below it, no less than the most a measured key at or above it took (a smaller graph needs no
more, and the keys under the largest measured may have taken nothing). The list's other sizes cost what
they added where measured, else the line. Captured in the order they were measured in, the measured sizes
cost what the pool held.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from ..cache import CUDAGraphStats, GraphCost
from ..config.modes import short_repr


@dataclasses.dataclass(frozen=True)
class MeasuredCosts:
    """One function's measured bytes per captured size, and the line fitted through them."""

    by_size: Mapping[int, int]
    intercept: float
    slope: float

    @classmethod
    def fit(cls, by_size: Mapping[int, int]) -> MeasuredCosts:
        sizes = sorted(by_size)
        if len(sizes) == 1:
            return cls(dict(by_size), float(by_size[sizes[0]]), 0.0)
        slope, intercept = np.polyfit(np.array(sizes, dtype=np.float64),
                                      np.array([by_size[s] for s in sizes], dtype=np.float64), 1)
        return cls(dict(by_size), float(intercept), float(slope))

    @property
    def largest(self) -> int:
        return max(self.by_size)

    def bytes_at(self, size: int) -> int:
        """What ``size`` costs beside a larger size of the list: measured, else the fitted line."""
        measured = self.by_size.get(size)
        if measured is not None:
            return measured
        return max(min(self.by_size.values()), round(self.intercept + self.slope * size))

    def largest_bytes(self, size: int) -> int:
        """What ``size`` costs as a list's largest size, whose graph pays for the blocks the others reuse."""
        largest = self.largest
        if size == largest:
            return self.by_size[size]
        if size > largest:
            return max(self.bytes_at(size), -(-self.by_size[largest] * size // largest))
        return max(self.bytes_at(size), max(nbytes for at, nbytes in self.by_size.items() if at >= size))

    def cost(self, sizes: Sequence[int]) -> int:
        """What a list of sizes costs: its largest priced as such, the others beside it."""
        top = max(sizes)
        return self.largest_bytes(top) + sum(self.bytes_at(size) for size in set(sizes) if size != top)


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """Bytes per capture size: the sum of each measured function's (``MeasuredCosts``), else ``flat``."""

    functions: tuple[MeasuredCosts, ...] = ()
    flat: Optional[int] = None

    @property
    def measured(self) -> bool:
        return bool(self.functions)

    def bytes_at(self, size: int) -> int:
        """What ``size`` costs beside a larger size of a list (``MeasuredCosts.bytes_at``), or the flat figure."""
        if self.functions:
            return sum(costs.bytes_at(size) for costs in self.functions)
        return self._flat()

    def cost(self, sizes: Iterable[int]) -> int:
        """What a list of sizes costs (``MeasuredCosts.cost`` summed over the functions), or the flat figure each."""
        chosen = sorted(set(sizes))
        if not chosen:
            return 0
        if self.functions:
            return sum(costs.cost(chosen) for costs in self.functions)
        return self._flat() * len(chosen)

    def largest_how(self, size: int) -> str:
        """How ``size`` is priced as a list's largest (``MeasuredCosts.largest_bytes``), in words."""
        ways = []
        for costs in self.functions:
            if size == costs.largest:
                ways.append("measured")
            elif size > costs.largest:
                ways.append(f"fitted, no less than size {costs.largest}'s bytes per row")
            else:
                ways.append("an upper bound: the most a measured key at or above it took")
        return "; ".join(dict.fromkeys(ways))

    def _flat(self) -> int:
        if self.flat is None:
            raise ValueError("no memory measured and no bytes per graph given")
        return self.flat

    def describe(self, sizes: Sequence[int], limit: int) -> str:
        """Where the costs of ``sizes`` come from, and what they add up to against ``limit``."""
        spent = f"the proposed sizes cost {self.cost(sizes):,} of memory_limit {limit:,} bytes"
        if not self.functions:
            return f"memory: flat {self.flat:,} bytes per graph (--bytes-per-graph; nothing measured); {spent}"
        measured = sorted({size for costs in self.functions for size in costs.by_size})
        top = max(sizes)
        parts = [f"memory: measured per key at capture ({len(self.functions)} function"
                 f"{'' if len(self.functions) == 1 else 's'}, sizes {measured})"]
        fitted = [size for size in sizes if size != top and any(size not in costs.by_size for costs in self.functions)]
        if fitted:
            lines = "; ".join(f"{round(costs.intercept):,} + {costs.slope:,.1f} x size" for costs in self.functions)
            parts.append(f"fitted for sizes {fitted}: bytes = {lines}")
        below = sorted({costs.largest for costs in self.functions if top < costs.largest})
        if below:  # the keys measured under the largest reused its blocks: their costs say nothing of top alone
            parts.append(f"size {top} is below the largest measured ({', '.join(map(str, below))}), whose blocks the "
                         f"keys measured under it reused: as the largest it is priced at {self.largest_how(top)} "
                         f"(capture a list ending at {top} to measure it)")
        elif self.largest_how(top) != "measured":
            parts.append(f"the largest size {top}: {self.largest_how(top)}")
        return "; ".join([*parts, spent])


def carries_costs(source: Any) -> bool:
    """Whether ``source`` is a form ``measured_costs`` reads (a plain histogram is not)."""
    return callable(getattr(source, "stats", None)) or isinstance(source, (CUDAGraphStats, Mapping))


def measured_costs(source: Any, where: str = "measured") -> Optional[MeasuredCosts]:
    """The measured bytes per size of one function: a jitted function (its statistics), a ``CUDAGraphStats``,
    or a mapping with ``"graph_costs"`` (what ``stats().to_dict()`` holds, as a JSON file has it); None where
    it holds no measured key. Anything else is a TypeError, a bad record a ValueError, starting with ``where``."""
    if callable(getattr(source, "stats", None)):
        source = source.stats()
    if isinstance(source, CUDAGraphStats):
        records: Any = source.costs()
    elif isinstance(source, Mapping):
        records = source.get("graph_costs", ())
    else:
        raise TypeError(f"{where}: expected a jitted function, its stats() or a mapping with 'graph_costs' "
                        f"(stats().to_dict()), got {type(source).__name__} {short_repr(source, 40)}")
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Iterable):
        raise TypeError(f"{where}: graph_costs must be a list of records (stats().to_dict()['graph_costs']), "
                        f"got {type(records).__name__} {short_repr(records, 40)}")
    by_size: dict[int, int] = {}
    for i, record in enumerate(records):
        size, nbytes = _size_and_bytes(record, f"{where}: graph_costs[{i}]")
        by_size[size] = by_size.get(size, 0) + nbytes
    return MeasuredCosts.fit(by_size) if by_size else None


def memory_model(sources: Iterable[Any], bytes_per_graph: Optional[int], where: str = "measured") -> MemoryModel:
    """The measured costs of every source that holds some (``measured_costs``), else the flat figure."""
    measured = tuple(costs for costs in (measured_costs(source, where) for source in sources) if costs is not None)
    return MemoryModel(measured, None if measured else bytes_per_graph)


def _size_and_bytes(record: Any, where: str) -> tuple[int, int]:
    if isinstance(record, GraphCost):
        return record.size, record.total_bytes
    if not isinstance(record, Mapping):
        raise TypeError(f"{where}: expected a record with size and pool_bytes, got {type(record).__name__}")
    size = _whole(record.get("size"), f"{where}.size", least=1)
    pool = _whole(record.get("pool_bytes"), f"{where}.pool_bytes", least=0)
    executable = record.get("executable_bytes")
    return size, pool + (0 if executable is None else _whole(executable, f"{where}.executable_bytes", least=0))


def _whole(value: Any, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{where} must be a whole number of at least {least}, got {short_repr(value, 40)}")
    return int(value)
