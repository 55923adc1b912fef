"""Capture sizes planned from traffic: the list that wastes the fewest padding rows under a limit.

A batch of n rows replays the graph of the smallest capture size >= n; the rows in between are
computed and thrown away. Given the histogram of real batch sizes (``stats().batch_sizes``) and a
limit on the number of graphs (or a memory limit and the bytes one graph costs), ``plan_capture_sizes``
finds the list of at most that many sizes that minimises the expected padding rows per call, with
the largest size kept (batches above it run eagerly under either list).

Under a memory limit with measured costs (``memory_model.py``: each key's bytes at capture, a fitted line
for sizes not captured, the list's largest size priced apart as the one whose blocks the others reuse), sizes
cost different amounts: the planner takes, for each number of sizes, the list with the least padding, and
proposes the best of those whose cost fits the limit (exact for one flat figure per graph; with measured
costs a list of more, cheaper sizes could pad less, and is not searched).

The optimum is exact: an optimal list only holds sizes seen in the traffic (lowering a size to
the largest batch it serves wastes less) plus the largest size, and over those sorted candidates
the cost of a list splits into independent segments, so a dynamic programme over (sizes used,
last size) finds it in O(max_graphs x candidates^2), with numpy over the inner minimum.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np

from ..cache import SizeHistogram
from ..config.modes import short_repr
from ..config.sizes import check_positive_int, normalise_sizes, pad_to_capture_size
from .memory_model import MemoryModel, carries_costs, memory_model


@dataclasses.dataclass(frozen=True)
class Waste:
    """What a list of capture sizes costs on a traffic histogram."""

    sizes: tuple[int, ...]
    padded_rows: int
    """Rows computed and thrown away over all graphed calls of the histogram."""
    graphed_calls: int
    computed_rows: int
    """Rows the graphed calls computed, padding included."""
    eager_calls: int
    """Calls above the largest size: they run eagerly."""

    @property
    def per_call(self) -> float:
        return self.padded_rows / self.graphed_calls if self.graphed_calls else 0.0

    @property
    def fraction(self) -> float:
        return self.padded_rows / self.computed_rows if self.computed_rows else 0.0

    def describe(self, label: str) -> str:
        count = f"{len(self.sizes)} size{'' if len(self.sizes) == 1 else 's'}"
        return (f"{label}: {count}, {self.per_call:.2f} padding rows per graphed call "
                f"({self.fraction:.1%} of the rows computed), {self.eager_calls:,} eager calls above {max(self.sizes)}")


@dataclasses.dataclass(frozen=True)
class SizePlan:
    current: Waste
    proposed: Waste
    calls: int
    memory: Optional[str] = None
    """Under a memory limit: where each size's cost came from (measured, fitted or flat) and the total."""

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.proposed.sizes

    def report(self) -> str:
        return "\n".join([
            f"traffic: {self.calls:,} calls",
            self.current.describe("current "),
            self.proposed.describe("proposed"),
            *([self.memory] if self.memory else []),
            f"proposed capture_sizes: {list(self.proposed.sizes)}",
        ])


HistogramLike = Union[SizeHistogram, Mapping[Any, Any], Iterable[tuple[int, int]]]


TRAFFIC_FORMS = ("a mapping of batch size to calls (or one under 'batch_sizes'), "
                 "(size, calls) pairs, a SizeHistogram or a jitted function")


def histogram_of(source: Any, where: str = "traffic") -> SizeHistogram:
    """A ``SizeHistogram`` from one, a jitted function (its traffic), a mapping size -> calls (or one
    under ``'batch_sizes'``) or (size, calls) pairs.

    The one check of traffic, for the API and ``cupygraph plan-sizes`` (whose JSON file is the
    mapping): anything else is a TypeError, a bad size or count a ValueError, each starting with
    ``where`` (the argument, or the file).
    """
    if isinstance(source, SizeHistogram):
        return source
    if callable(getattr(source, "stats", None)):
        found: SizeHistogram = source.stats().batch_sizes
        return found
    if isinstance(source, Mapping) and isinstance(source.get("batch_sizes"), Mapping):
        source = source["batch_sizes"]
    elif isinstance(source, Mapping) and "batch_sizes" in source:
        found = source["batch_sizes"]
        raise TypeError(f"{where}: batch_sizes must be a mapping of batch size to calls "
                        f"(stats().batch_sizes.to_dict()), got {type(found).__name__} {short_repr(found, 40)}")
    elif isinstance(source, Mapping) and "graph_costs" in source:
        raise ValueError(f"{where}: holds graph_costs but no batch_sizes: put the calls per batch size under "
                         "'batch_sizes' (stats().batch_sizes.to_dict())")
    if isinstance(source, Mapping):
        pairs: Any = source
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes)):
        pairs = list(source)
        odd = [item for item in pairs if not _is_pair(item)]
        if odd:
            counted = (" (a list of batch sizes becomes one with collections.Counter(sizes))"
                       if all(isinstance(item, numbers.Integral) for item in odd) else "")
            raise TypeError(f"{where}: expected {TRAFFIC_FORMS}; got a {type(source).__name__} holding "
                            f"{short_repr(odd[0], 40)}{counted}")
    else:
        raise TypeError(f"{where}: expected {TRAFFIC_FORMS}; got {type(source).__name__} {short_repr(source, 40)}")
    try:
        return SizeHistogram(pairs)
    except (ValueError, OverflowError) as err:  # OverflowError: a count such as 1e400 (infinity)
        raise ValueError(f"{where}: {err}; sizes and counts are whole numbers") from None


def _is_pair(item: Any) -> bool:
    return isinstance(item, Sequence) and not isinstance(item, (str, bytes)) and len(item) == 2


def expected_waste(histogram: HistogramLike, sizes: Sequence[int]) -> Waste:
    """The padding ``sizes`` waste on ``histogram`` (exact integers)."""
    chosen = tuple(normalise_sizes(sizes, "sizes"))
    if not chosen:
        raise ValueError("sizes: give at least one capture size")
    padded = graphed = computed = eager = 0
    for n, calls in histogram_of(histogram, "histogram").items():
        to = pad_to_capture_size(n, chosen)
        if to is None:
            eager += calls
            continue
        padded += calls * (to - n)
        graphed += calls
        computed += calls * to
    return Waste(chosen, padded, graphed, computed, eager)


def check_limits(max_graphs: Optional[int], memory_limit: Optional[int], bytes_per_graph: Optional[int]) -> None:
    """A TypeError naming the first limit given that is no integer."""
    for value, name in ((max_graphs, "max_graphs (--max-graphs)"), (memory_limit, "memory_limit (--memory-limit)"),
                        (bytes_per_graph, "bytes_per_graph (--bytes-per-graph)")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {short_repr(value)}")
    if max_graphs is not None and max_graphs < 1:
        raise ValueError(f"max_graphs (--max-graphs) must be at least 1, got {max_graphs}")


def graphs_allowed(max_graphs: Optional[int], memory_limit: Optional[int], bytes_per_graph: Optional[int]) -> int:
    """The limit on the number of sizes: ``max_graphs``, or what ``memory_limit`` pays for."""
    check_limits(max_graphs, memory_limit, bytes_per_graph)
    if memory_limit is not None:
        if not bytes_per_graph or bytes_per_graph <= 0:
            raise ValueError("memory_limit (--memory-limit) needs what graphs cost: measured, from the statistics of "
                             "captured graphs (plan from a jitted function, a --script, or a --histogram file holding "
                             "stats().to_dict()'s graph_costs), or bytes_per_graph (--bytes-per-graph), a positive "
                             "number")
        by_memory = int(memory_limit) // int(bytes_per_graph)
        if by_memory < 1:
            raise ValueError(f"memory_limit (--memory-limit) = {memory_limit} bytes does not hold one graph of "
                             f"{bytes_per_graph} bytes (--bytes-per-graph)")
        return by_memory if max_graphs is None else min(by_memory, max_graphs)
    if max_graphs is None:
        raise ValueError("give max_graphs (--max-graphs) or memory_limit (--memory-limit, with --bytes-per-graph): "
                         "without a limit every seen size would be captured")
    return int(max_graphs)


def plan_capture_sizes(
    traffic: Any, *, current: Sequence[int], max_graphs: Optional[int] = None,
    memory_limit: Optional[int] = None, bytes_per_graph: Optional[int] = None, largest: Optional[int] = None,
    measured: Any = None,
) -> SizePlan:
    """The capture sizes that minimise expected padding on ``traffic`` under the limit, compared with
    ``current``. ``largest`` (default: the current largest size) stays the largest size.

    ``traffic`` is what ``histogram_of`` reads; each argument is checked here, as the command
    checks it, and a wrong one is an error naming it. Under ``memory_limit`` the sizes cost what
    ``measured`` measured at capture (a jitted function, its statistics, a mapping with ``graph_costs``,
    or a list of them, one per function, or a ``MemoryModel``; default: ``traffic`` where it is one of those),
    fitted for sizes not captured (``memory_model.py``); ``bytes_per_graph`` is the flat cost where nothing
    was measured. The plan's ``memory`` line says which it used.
    """
    histogram = histogram_of(traffic)
    sizes_now = normalise_sizes(current, "current")
    if not sizes_now:
        raise ValueError("current: give the capture sizes in use (the config's)")
    top = check_positive_int(largest, "largest (--largest)") if largest is not None else sizes_now[-1]
    if histogram.total() == 0:
        raise ValueError("the traffic holds no calls: run the workload first (or give a histogram with counts)")
    check_limits(max_graphs, memory_limit, bytes_per_graph)
    model = MemoryModel()
    if isinstance(measured, MemoryModel):
        model = measured if measured.measured else MemoryModel((), bytes_per_graph)
    elif memory_limit is not None:
        if measured is None:  # what the traffic carries, where it is a function or statistics
            sources = [traffic] if carries_costs(traffic) else []
        else:
            sources = list(measured) if isinstance(measured, (list, tuple)) else [measured]
        model = memory_model(sources, bytes_per_graph, "measured" if measured is not None else "traffic")
    points = [(n, c) for n, c in histogram.items() if n <= top]
    if model.measured and memory_limit is not None:
        sizes = sizes_within_memory(points, top, model, check_positive_int(memory_limit, "memory_limit "
                                    "(--memory-limit)"), max_graphs)
    else:
        sizes = optimal_sizes(points, top, graphs_allowed(max_graphs, memory_limit, bytes_per_graph))
    note = None
    if memory_limit is not None:
        unused = " (bytes_per_graph not used: the measured costs take its place)" if (
            model.measured and bytes_per_graph is not None) else ""
        note = model.describe(sizes, int(memory_limit)) + unused
    return SizePlan(expected_waste(histogram, sizes_now), expected_waste(histogram, sizes), histogram.total(), note)


def sizes_within_memory(points: Sequence[tuple[int, int]], largest: int, model: MemoryModel, memory_limit: int,
                        max_graphs: Optional[int] = None) -> list[int]:
    """The list (ending with ``largest``) with the least padding on ``points`` among each number of sizes'
    optimum whose cost under ``model`` fits ``memory_limit``, at most ``max_graphs`` sizes."""
    candidates = sorted({n for n, c in points if c > 0} | {largest})
    first = model.cost([largest])
    if first > memory_limit:
        how = model.largest_how(largest)
        measure = "" if how == "measured" else f", or capture a list ending at {largest} to measure it"
        raise ValueError(f"memory_limit (--memory-limit) = {memory_limit:,} bytes does not hold the graph of the "
                         f"largest size {largest} ({first:,} bytes, {how}); raise the limit or lower the largest "
                         f"size (--largest){measure}")
    # No list of more sizes fits than the largest with the cheapest others.
    cheapest = np.cumsum(sorted(model.bytes_at(n) for n in candidates if n != largest))
    count = 1 + int(np.searchsorted(cheapest, memory_limit - first, side="right"))
    count = min(count, len(candidates), max_graphs if max_graphs is not None else len(candidates))
    if count == len(candidates) and model.cost(candidates) <= memory_limit:
        return candidates
    fitting = [(padding, sizes) for padding, sizes in optimal_lists(points, largest, count)
               if model.cost(sizes) <= memory_limit]
    return min(fitting, key=lambda found: (found[0], len(found[1])))[1]  # the largest alone always fits


def optimal_sizes(points: Sequence[tuple[int, int]], largest: int, limit: int) -> list[int]:
    """At most ``limit`` sizes ending with ``largest`` that minimise sum(calls x (padded - n)) over
    ``points`` (size, calls), all at most ``largest``."""
    check_positive_int(largest, "largest")
    check_positive_int(limit, "limit")
    points = list(points)
    if not all(_is_pair(point) for point in points):
        raise TypeError(f"points must be (size, calls) pairs, got {short_repr(points, 60)}")
    candidates = sorted({n for n, c in points if c > 0} | {largest})
    if limit >= len(candidates):
        return candidates
    return optimal_lists(points, largest, limit)[-1][1]


def optimal_lists(points: Sequence[tuple[int, int]], largest: int, limit: int) -> list[tuple[float, list[int]]]:
    """For each k from 1 to ``limit`` (at most the candidates' number): (padding rows, the k sizes ending with
    ``largest`` that minimise it) over ``points`` (size, calls), all at most ``largest``."""
    weights = {n: c for n, c in points if c > 0}
    candidates = sorted(set(weights) | {largest})
    value = np.array([0, *candidates], dtype=np.float64)
    weight = np.array([0, *(weights.get(n, 0) for n in candidates)], dtype=np.float64)
    rows = np.cumsum(weight)  # calls up to candidate j
    mass = np.cumsum(weight * value)  # their rows
    m = len(candidates)
    limit = min(limit, m)
    best = np.full(m + 1, np.inf)
    best[0] = 0.0  # no size chosen yet, nothing covered
    choices = np.zeros((limit + 1, m + 1), dtype=np.int64)
    padding = [0.0] * (limit + 1)
    for k in range(1, limit + 1):
        offset = best + mass  # f[k-1][i] + mass[i]
        step = np.full(m + 1, np.inf)
        for j in range(k, m + 1):
            # Points in (c_i, c_j] pad to c_j: c_j*(rows[j]-rows[i]) - (mass[j]-mass[i]).
            totals = offset[:j] - value[j] * rows[:j]
            i = int(np.argmin(totals))
            step[j] = totals[i] + value[j] * rows[j] - mass[j]
            choices[k, j] = i
        best = step
        padding[k] = float(best[m])
    found = []
    for size_count in range(1, limit + 1):
        chosen, j, k = [], m, size_count
        while j > 0:
            chosen.append(candidates[j - 1])
            j, k = int(choices[k, j]), k - 1
        found.append((padding[size_count], sorted(chosen)))
    return found
