"""Capture sizes, padding and token limits: pure functions on integers, shared by the config and the
decision (``pad_to_capture_size`` is the one padding helper)."""

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


DEFAULT_MAX_CAPTURE_SIZE = 512
"""vLLM's cap on the default largest capture size: larger graphs cost start-up time for little gain."""


def default_max_capture_size(max_num_reqs: Optional[int], uniform_decode_query_len: int = 1) -> int:
    """vLLM's default largest capture size: min(2 × max_num_reqs × query length, 512); 512 without a
    request limit. Twice the largest decode batch leaves room for small mixed batches."""
    if max_num_reqs is None:
        return DEFAULT_MAX_CAPTURE_SIZE
    return min(2 * max_num_reqs * uniform_decode_query_len, DEFAULT_MAX_CAPTURE_SIZE)


def round_up_to_multiples(sizes: Iterable[int], multiple: int, limit: int) -> list[int]:
    """vLLM's rule for speculative decoding: each size rounded up to a multiple of ``multiple``,
    keeping those within ``limit`` (sorted, de-duplicated).

    If every rounded size passes ``limit`` but ``multiple`` itself fits, that one size is kept;
    if not even that fits, ``ValueError`` says so.
    """
    rounded = sorted({-(-s // multiple) * multiple for s in sizes})
    kept = [s for s in rounded if s <= limit]
    if not kept and multiple <= limit:
        kept = [multiple]
    if not kept:
        raise ValueError(
            f"no capture size is left after rounding up to multiples of {multiple}: even {multiple} is above "
            f"the largest capture size {limit}"
        )
    return kept


def decode_capture_sizes(
    sizes: Sequence[int], uniform_decode_query_len: int, max_num_reqs: Optional[int]
) -> tuple[int, ...]:
    """The sizes of FULL uniform-decode graphs: ``sizes`` rounded up to multiples of the query
    length within the largest size, from one request up to ``max_num_reqs`` requests."""
    q = uniform_decode_query_len
    if not sizes:
        return ()
    try:
        rounded = round_up_to_multiples(sizes, q, sizes[-1]) if q > 1 else list(sizes)
    except ValueError:  # not even one request fits the largest size
        return ()
    return tuple(s for s in rounded if max_num_reqs is None or s <= q * max_num_reqs)


def resolve_capture_sizes(
    capture_sizes: Optional[Sequence[int]],
    max_capture_size: Optional[int],
    max_num_reqs: Optional[int] = None,
    uniform_decode_query_len: int = 1,
    round_to_query_len: bool = False,
) -> tuple[int, list[int]]:
    """The one rule for which sizes are captured: ``(max_capture_size, sizes)``.

    ``max_capture_size`` unset: the largest of ``capture_sizes`` when given, else
    ``default_max_capture_size``. ``capture_sizes`` unset: the default sizes up to it. With
    ``round_to_query_len`` and a query length above 1, sizes are rounded up to multiples of it
    within ``max_capture_size`` (so every uniform-decode batch has a graph). Inputs are taken as
    validated (sorted sizes, consistent maximum); the config checks them first.
    """
    if max_capture_size is None:
        if capture_sizes is not None:
            max_capture_size = capture_sizes[-1] if capture_sizes else 0
        else:
            max_capture_size = default_max_capture_size(max_num_reqs, uniform_decode_query_len)
    if capture_sizes is not None:
        sizes = list(capture_sizes)
    else:
        sizes = default_capture_sizes(max_capture_size) if max_capture_size else []
    if round_to_query_len and uniform_decode_query_len > 1 and sizes:
        sizes = round_up_to_multiples(sizes, uniform_decode_query_len, max_capture_size)
    return max_capture_size, sizes


def pad_to_capture_size(n: int, sizes: Sequence[int]) -> Optional[int]:
    """The smallest size in the sorted ``sizes`` that is >= ``n``; None above the largest."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def outside_token_limits(num_tokens: int, min_tokens: int, max_tokens: Optional[int]) -> Optional[str]:
    """Why a batch of ``num_tokens`` (real, unpadded) rows is outside the token limits, or None.

    The one place token limits are checked: ``decide`` asks it with the real batch size, so a
    batch smaller than ``min_tokens`` runs eagerly even where it would pad to a larger graph.
    """
    if num_tokens < min_tokens:
        return f"batch of {num_tokens} is below min_tokens_for_graph={min_tokens}"
    if max_tokens is not None and num_tokens > max_tokens:
        return f"batch of {num_tokens} is above max_tokens_for_graph={max_tokens}"
    return None


def normalise_sizes(sizes: Iterable[Any], name: str = "capture_sizes") -> list[int]:
    """De-duplicate and sort, rejecting anything that is not a positive int (naming its index)."""
    checked = [check_positive_int(s, f"{name}[{i}]") for i, s in enumerate(sizes)]
    return sorted(set(checked))
