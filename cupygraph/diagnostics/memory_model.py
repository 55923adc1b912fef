"""What capture sizes cost in memory, for ``plan_capture_sizes(memory_limit=...)`` and ``cupygraph plan-sizes
--memory-limit``: measured where the sizes were captured, fitted where they were not, flat where nothing was.

A key's measured cost is what its capture took (``stats().graph_costs``: pool bytes plus, where measured,
the executable's; ``cache.stats.GraphCost`` says what each is). A size costs the sum over the keys captured
at it (its modes and signatures), and, over several functions, the sum of each function's cost. For a size
a function did not capture, its cost is a least-squares line in the batch size through the sizes it did
capture (one captured size: that size's cost), never below the cheapest it measured. Where nothing was
measured, each graph costs the flat ``bytes_per_graph``.

The measured costs follow the order the sizes were captured in: a family's graphs share its pool, so the
first (largest, under ``warmup``) pays for the blocks the later ones reuse. A list's cost is the sum of its
sizes' costs, which for the measured sizes is what the pool held.
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

    def bytes_at(self, size: int) -> int:
        measured = self.by_size.get(size)
        if measured is not None:
            return measured
        return max(min(self.by_size.values()), round(self.intercept + self.slope * size))


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """Bytes per capture size: the sum of each measured function's (``MeasuredCosts``), else ``flat``."""

    functions: tuple[MeasuredCosts, ...] = ()
    flat: Optional[int] = None

    @property
    def measured(self) -> bool:
        return bool(self.functions)

    def bytes_at(self, size: int) -> int:
        if self.functions:
            return sum(costs.bytes_at(size) for costs in self.functions)
        if self.flat is None:
            raise ValueError("no memory measured and no bytes per graph given")
        return self.flat

    def cost(self, sizes: Iterable[int]) -> int:
        return sum(self.bytes_at(size) for size in sizes)

    def describe(self, sizes: Sequence[int], limit: int) -> str:
        """Where the costs of ``sizes`` come from, and what they add up to against ``limit``."""
        spent = f"the proposed sizes cost {self.cost(sizes):,} of memory_limit {limit:,} bytes"
        if not self.functions:
            return f"memory: flat {self.flat:,} bytes per graph (--bytes-per-graph; nothing measured); {spent}"
        measured = sorted({size for costs in self.functions for size in costs.by_size})
        fitted = [size for size in sizes if any(size not in costs.by_size for costs in self.functions)]
        lines = "; ".join(f"{round(costs.intercept):,} + {costs.slope:,.1f} x size" for costs in self.functions)
        return (f"memory: measured per key at capture ({len(self.functions)} function"
                f"{'' if len(self.functions) == 1 else 's'}, sizes {measured}); "
                + (f"fitted for sizes {fitted}: bytes = {lines}; " if fitted else "") + spent)


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
