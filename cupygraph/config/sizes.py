"""Capture sizes, padding and token limits: pure functions on integers, shared by the config and the
decision (``pad_to_capture_size`` is the one padding helper)."""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from .modes import short_repr


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as a Python int if it is a positive integer (NumPy integers too, bools never);
    else raise naming ``name``."""
    if type(value) is int and value > 0:  # the common case, without the slower ABC checks below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {short_repr(value)}")
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


def decode_capture_sizes(
    sizes: Sequence[int], uniform_decode_query_len: int, max_num_reqs: Optional[int]
) -> tuple[int, ...]:
    """The ladder of FULL uniform-decode graphs (vLLM's per-mode candidates under speculative
    decoding): each capture size rounded up to a multiple of the query length, kept when it is
    within the largest capture size and ``max_num_reqs`` requests (sorted, de-duplicated).

    Only the decode graphs sit on these sizes; mixed batches and PIECEWISE graphs keep ``sizes``
    as given. With [1, 2, 4, 8, 16, 24], query length 3 and 8 requests: 3, 6, 9, 18, 24. Empty
    when no rounded size fits (``decode_ladder_problem`` says why).
    """
    q = uniform_decode_query_len
    if not sizes:
        return ()
    # vLLM's two caps: the largest capture size, and max_num_reqs whole requests.
    limit = sizes[-1] if max_num_reqs is None else min(sizes[-1], q * max_num_reqs)
    return tuple(sorted({r for r in (-(-s // q) * q for s in sizes) if r <= limit}))


def decode_ladder_problem(
    sizes: Sequence[int], uniform_decode_query_len: int, max_num_reqs: Optional[int]
) -> Optional[str]:
    """Why ``decode_capture_sizes`` is empty for non-empty ``sizes`` (no FULL decode graph would be
    made), or None when it is not."""
    q = uniform_decode_query_len
    if not sizes or decode_capture_sizes(sizes, q, max_num_reqs):
        return None
    caps, raise_ = f"the largest capture size {sizes[-1]}", "max_capture_size"
    if max_num_reqs is not None and q * max_num_reqs < sizes[-1]:
        caps, raise_ = f"{caps} and max_num_reqs x {q} = {q * max_num_reqs}", "max_capture_size or max_num_reqs"
    return (f"no uniform-decode FULL graph fits: the capture sizes rounded up to multiples of {q} are all above "
            f"{caps}; lower the query length or raise {raise_}")


def resolve_capture_sizes(
    capture_sizes: Optional[Sequence[int]],
    max_capture_size: Optional[int],
    max_num_reqs: Optional[int] = None,
    uniform_decode_query_len: int = 1,
) -> tuple[int, list[int]]:
    """The one rule for which sizes a config lists: ``(max_capture_size, sizes)``.

    ``max_capture_size`` unset: the largest of ``capture_sizes`` when given, else
    ``default_max_capture_size``. ``capture_sizes`` unset: the default sizes up to it. The sizes
    are never rounded to the query length: each runtime mode builds its own ladder from them
    (``decode_capture_sizes`` for FULL uniform-decode graphs). Inputs are taken as validated
    (sorted sizes, consistent maximum); the config checks them first.
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
    """De-duplicate and sort, rejecting anything that is not a list of positive ints (naming
    ``name`` and the index)."""
    if isinstance(sizes, (str, bytes, numbers.Number, Mapping)) or not isinstance(sizes, Iterable) \
            or getattr(sizes, "ndim", 1) == 0:
        raise TypeError(f"{name} must be a list of positive integers, got {type(sizes).__name__} {short_repr(sizes)}")
    checked = [check_positive_int(s, f"{name}[{i}]") for i, s in enumerate(sizes)]
    return sorted(set(checked))
