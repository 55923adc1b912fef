"""The rules that tie ``CUDAGraphConfig`` fields together, as pydantic field validators.

Each rule runs on the later of the fields it relates (``info.data`` holds the earlier ones, when
they were valid), so a config file's error names that field and its line. The sizes a config
lists come from ``sizes.resolve_capture_sizes``, the one rule the config itself applies.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationInfo

from .modes import CUDAGraphMode
from .sizes import decode_ladder_problem, default_capture_sizes, resolve_capture_sizes
from .values import as_size_list

MAX_WARMUPS = 1000
"""Most eager warm-up runs before a capture (a larger count is a typo that would stall the capture)."""

MAX_LIST_LENGTH = 4096
"""Most entries in capture_sizes or seq_len_buckets: each capture size is a graph (the default list
up to 65536 has 4 080), so a longer list is a mistake that would take hours to capture."""

MAX_DEFAULT_CAPTURE_SIZE = 1 << 16
"""Largest max_capture_size without explicit capture_sizes (the default list then has 4 080 sizes)."""


def check_size_list(value: Any, info: ValidationInfo) -> Any:
    """``capture_sizes`` / ``seq_len_buckets``: a list within the length limit; empty only for
    ``capture_sizes`` under mode NONE, which captures nothing."""
    sizes = as_size_list(value)
    nothing_to_capture = info.field_name == "capture_sizes" and info.data.get("mode") is CUDAGraphMode.NONE
    if sizes is not None and not sizes and not nothing_to_capture:
        # An empty list would silently run every batch eagerly.
        raise ValueError("the list is empty; leave the field out for the defaults (or set mode: NONE)")
    if sizes is not None and len(sizes) > MAX_LIST_LENGTH:
        raise ValueError(f"the list has {len(sizes)} entries; at most {MAX_LIST_LENGTH} are allowed (the limit)")
    return sizes


def check_max_capture_size(value: Optional[int], info: ValidationInfo) -> Optional[int]:
    """Given with ``capture_sizes``, it must equal their largest (vLLM refuses the pair otherwise)."""
    if value is None:
        return None
    capturing = info.data.get("mode") is not CUDAGraphMode.NONE
    if value == 0 and capturing:
        raise ValueError("Input should be greater than or equal to 1 (0, nothing to capture, only under mode NONE)")
    if "capture_sizes" not in info.data:
        return value  # the sizes were invalid: that error is enough
    sizes = info.data["capture_sizes"]
    largest = None if sizes is None else sizes[-1] if sizes else 0
    if largest is not None and largest != value and capturing:
        raise ValueError(_mismatch_message(largest, value))
    if sizes is None and value > MAX_DEFAULT_CAPTURE_SIZE:
        count = len(default_capture_sizes(MAX_DEFAULT_CAPTURE_SIZE)) + (value - MAX_DEFAULT_CAPTURE_SIZE) // 16
        raise ValueError(
            f"without capture_sizes, max_capture_size={value} means about {count} default capture sizes "
            f"(a graph each); the defaults go up to {MAX_DEFAULT_CAPTURE_SIZE}: list capture_sizes for "
            f"larger batches"
        )
    return value


def check_decode_graphs(value: int, info: ValidationInfo) -> int:
    """``uniform_decode_query_len``: a mode with FULL uniform-decode graphs of their own
    (FULL_DECODE_ONLY, FULL_AND_PIECEWISE) must be left at least one such graph once the capture
    sizes are rounded up to multiples of it."""
    sizes = _resolve(info.data, value)
    mode = info.data.get("mode")
    if not sizes or not isinstance(mode, CUDAGraphMode) or not mode.has_uniform_decode_graphs():
        return value
    problem = decode_ladder_problem(sizes, value, info.data["max_num_reqs"])
    if problem is not None:
        raise ValueError(f"uniform_decode_query_len={value}: {problem}")
    return value


def check_min_tokens(value: int, info: ValidationInfo) -> int:
    """``min_tokens_for_graph`` above the largest capture size would leave no batch a graph."""
    resolved = _resolve(info.data, info.data.get("uniform_decode_query_len"))
    if resolved and value > resolved[-1]:
        raise ValueError(
            f"min_tokens_for_graph={value} is above the largest capture size {resolved[-1]}: no batch would "
            f"replay a graph; lower it (or set mode: NONE to run eagerly)"
        )
    return value


def check_max_tokens(value: Optional[int], info: ValidationInfo) -> Optional[int]:
    low = info.data.get("min_tokens_for_graph")
    if value is not None and low is not None and value < low:
        raise ValueError(f"max_tokens_for_graph={value} is below min_tokens_for_graph={low}")
    return value


def _resolve(data: dict[str, Any], query_len: Any) -> Optional[tuple[int, ...]]:
    """The sizes a config being validated would list (``data``: the fields validated so far); None
    when an earlier field failed or under mode NONE."""
    needed = ("mode", "capture_sizes", "max_capture_size", "max_num_reqs")
    if query_len is None or any(name not in data for name in needed) or data["mode"] is CUDAGraphMode.NONE:
        return None
    _, sizes = resolve_capture_sizes(data["capture_sizes"], data["max_capture_size"], data["max_num_reqs"], query_len)
    return tuple(sizes)


def _mismatch_message(largest: int, max_capture_size: int) -> str:
    if largest > max_capture_size:
        return (
            f"capture_sizes has {largest}, above max_capture_size={max_capture_size}; raise max_capture_size "
            f"or drop the larger sizes (or leave max_capture_size out: it follows capture_sizes)"
        )
    return (
        f"max_capture_size={max_capture_size} does not match capture_sizes, whose largest is {largest}: batches "
        f"of {largest + 1}..{max_capture_size} would run eagerly; make them agree or leave max_capture_size "
        f"out (it follows capture_sizes)"
    )
