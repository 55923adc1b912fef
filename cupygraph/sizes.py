"""Capture sizes and padding: pure functions on integers, shared by the config and the dispatcher."""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Optional


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as a Python int if it is a positive integer (NumPy integers too, bools never);
    else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def default_capture_sizes(max_capture_size: int) -> list[int]:
    """vLLM's default: [1, 2, 4] + 8..248 step 8 + 256..max step 16, clipped to ``max_capture_size``.

    For 512 that is 51 sizes: dense where small batches are common, sparser where padding a large
    batch by a few rows costs little.
    """
    check_positive_int(max_capture_size, "max_capture_size")
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_capture_size + 1, 16)]
    return [s for s in sizes if s <= max_capture_size]


def pad_to_capture_size(n: int, sizes: Sequence[int]) -> Optional[int]:
    """The smallest size in the sorted ``sizes`` that is >= ``n``; None above the largest."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def normalise_sizes(sizes: Iterable[Any], name: str = "capture_sizes") -> list[int]:
    """De-duplicate and sort, rejecting anything that is not a positive int (naming its index)."""
    checked = [check_positive_int(s, f"{name}[{i}]") for i, s in enumerate(sizes)]
    return sorted(set(checked))
