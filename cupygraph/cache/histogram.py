"""A bounded histogram of real batch sizes: the traffic ``plan-sizes`` plans capture sizes from.

Sizes up to ``EXACT_UP_TO`` are counted exactly; larger ones (eager traffic above any graph, or
tokens of prefill batches) go to the top of a bucket of at most 1/64 of an octave, so the
histogram never holds more than about 3,000 sizes however varied the traffic.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

EXACT_UP_TO = 2048
_BUCKETS_PER_OCTAVE = 64


def bucket_of(size: int) -> int:
    """``size`` itself up to ``EXACT_UP_TO``; above, the top of its bucket (rounded up, never down)."""
    if size <= EXACT_UP_TO:
        return size
    step = 1 << max(0, size.bit_length() - 1 - (_BUCKETS_PER_OCTAVE.bit_length() - 1))
    return -(-size // step) * step


class SizeHistogram:
    """Counts of calls per real batch size (rows before padding)."""

    __slots__ = ("_counts",)

    def __init__(self, counts: Union[Mapping[Any, Any], Iterable[tuple[Any, Any]], None] = None):
        self._counts: dict[int, int] = {}
        pairs = counts.items() if isinstance(counts, Mapping) else (counts or ())
        for size, count in pairs:
            self.add(_positive(size, "batch size"), _positive(count, f"count of batch size {size}", zero=True))

    def add(self, size: int, count: int = 1) -> None:
        if count:
            key = bucket_of(size)
            self._counts[key] = self._counts.get(key, 0) + count

    def total(self) -> int:
        return sum(self._counts.values())

    def items(self) -> list[tuple[int, int]]:
        """(size, calls), smallest size first."""
        return sorted(self._counts.items())

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.items())

    def __len__(self) -> int:
        return len(self._counts)

    def __add__(self, other: SizeHistogram) -> SizeHistogram:
        merged = SizeHistogram(self._counts)
        for size, count in other._counts.items():
            merged.add(size, count)
        return merged

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SizeHistogram) and self._counts == other._counts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def to_dict(self) -> dict[str, int]:
        """JSON-ready: sizes as strings, smallest first (what ``from_mapping`` and the CLI read)."""
        return {str(size): count for size, count in self.items()}

    def __repr__(self) -> str:
        return f"SizeHistogram({dict(self.items())})"


def _positive(value: Any, what: str, zero: bool = False) -> int:
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # True is no count of calls
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    try:
        number = int(value)
        if number != value and str(number) != str(value).strip():
            raise ValueError
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{what} must be a whole number, got {value!r}") from err
    if number < (0 if zero else 1):
        raise ValueError(f"{what} must be {'0 or more' if zero else 'at least 1'}, got {number}")
    return number
