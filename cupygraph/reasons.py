"""Why a call ran eagerly, a graph was evicted or re-captured: a fixed set of codes with human text.

Statistics count by code (``FallbackReason.ABOVE_LARGEST.value``), so they cannot grow with the
traffic; the variable detail of one occurrence (a batch size, the op and the user's line) is kept
as the last detail per code. Each detail starts with its code's text, so a detail alone (a
``CaptureError`` message from a backend) can be mapped back to its code.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional


class _Reason(str, Enum):
    """A code (the value, stable for dashboards) with the text a user reads (``text``)."""

    @property
    def text(self) -> str:
        return _TEXTS[self.value]

    def describe(self, detail: Optional[str] = None) -> str:
        """The detail when there is one (it starts with the text), else the text."""
        return detail if detail else self.text


class FallbackReason(_Reason):
    """Why a call ran the function eagerly instead of replaying a graph."""

    MODE_NONE = "mode_none"
    EMPTY_BATCH = "empty_batch"
    ABOVE_LARGEST = "above_largest_capture_size"
    SEQ_LEN_ABOVE_LARGEST = "seq_len_above_largest_bucket"
    OUTSIDE_TOKEN_LIMITS = "outside_token_limits"
    NO_GRAPH_MODE = "no_graph_mode"
    POLICY_VETO = "policy_veto"
    COLD_KEY = "cold_key"
    DEVICE_TO_HOST = "device_to_host_read"
    DATA_DEPENDENT_SHAPE = "data_dependent_shape"
    LIBRARY_CALL = "library_call"
    HOST_UPLOAD = "host_upload"
    OUT_OF_MEMORY = "out_of_memory"
    OVER_BUDGET = "graph_over_memory_budget"
    CAPTURE_FAILED = "capture_failed"
    CAPTURE_RAISED = "exception_during_capture"
    RAISED_ON_PADDING = "raised_on_padding"
    UNSUPPORTED_OUTPUT = "unsupported_output"
    REPLAY_MISMATCH = "replay_mismatch"
    COLLECTIVE_IN_CONDITIONAL = "collective_in_conditional"
    CONDITIONAL_BODY_NODE = "node_refused_in_conditional_body"
    PEER_CAPTURE_FAILED = "capture_failed_on_another_rank"
    ALIASED_WRITE = "aliased_write"
    BATCH_NOT_LEADING = "batch_axis_not_leading"


class EvictionReason(_Reason):
    """Why a graph left the cache."""

    MAX_CACHED_GRAPHS = "max_cached_graphs"
    MEMORY_BUDGET = "memory_budget"
    POOL_OVER_BUDGET = "pool_over_memory_budget"
    CLEARED = "cleared"
    REMOVED = "removed"
    UNEXPECTED_OUTPUT_SHAPES = "unexpected_output_shapes"
    FAILED_REPLAY = "failed_replay"
    PEER_CAPTURE_FAILED = "dropped_capture_failed_on_another_rank"


class RecaptureReason(_Reason):
    """Why a key was captured again."""

    CONSTANT_CHANGED = "constant_changed"
    STATIC_NEVER_EQUAL = "static_never_equal"


# Codes are unique across the three kinds: the statistics keep one detail table for all of them.
_TEXTS = {
    "mode_none": "graphs disabled (mode NONE)",
    "empty_batch": "empty batch (0 rows)",
    "above_largest_capture_size": "batch above the largest capture size",
    "seq_len_above_largest_bucket": "sequence length above the largest seq_len bucket",
    "outside_token_limits": "batch outside min_tokens_for_graph..max_tokens_for_graph",
    "no_graph_mode": "no graph mode for this batch under the configured mode",
    "policy_veto": "the dispatch policy chose to run eagerly",
    "cold_key": "cold key: seen fewer than capture_after times",
    "device_to_host_read": "device-to-host read during capture",
    "data_dependent_shape": "output shape depends on the data",
    "library_call": "library call CuPy cannot capture",
    "host_upload": "host-to-device upload during capture",
    "out_of_memory": "out of memory during capture",
    "graph_over_memory_budget": "the graph alone is above memory_budget",
    "capture_failed": "an operation not allowed during capture",
    "exception_during_capture": "an exception during warm-up, capture or output handling",
    "raised_on_padding": "the function raised on a padded batch but works at its real batch (the padding rows)",
    "unsupported_output": "an output that is neither an array nor a plain Python value",
    "replay_mismatch": "a replay returned outputs of another structure, shape or value",
    "collective_in_conditional": "a collective inside a while_loop/cond/switch body",
    "node_refused_in_conditional_body": "a node CUDA refuses in a while_loop/cond/switch body",
    "capture_failed_on_another_rank": "the capture failed on another rank (ranks fall back together)",
    "aliased_write": "the function writes into an argument that shares memory with another argument",
    "batch_axis_not_leading": "a padded batch whose output cannot be cut back to the real rows",
    "max_cached_graphs": "max_cached_graphs reached",
    "memory_budget": "memory_budget reached",
    "pool_over_memory_budget": "memory_budget reached by the pool with cached blocks: all graphs dropped",
    "cleared": "cleared by clear()",
    "removed": "removed by remove() or remove_key()",
    "unexpected_output_shapes": "capture_fn returned outputs of other shapes than expected",
    "failed_replay": "its replay returned outputs of another structure, shape or value",
    "dropped_capture_failed_on_another_rank": "the same capture failed on another rank",
    "constant_changed": "a constant argument changed address, shape, dtype or strides",
    "static_never_equal": "a static argument that never compares equal to an earlier call's",
}


def reason_of_capture_failure(message: str, reason: Optional[FallbackReason] = None) -> FallbackReason:
    """The code of a capture failure: ``reason`` when the raiser knew it, else the code whose
    text the message starts with (backends build their messages that way), else CAPTURE_FAILED."""
    if reason is not None:
        return reason
    for code in FallbackReason:
        if message.startswith(code.text):
            return code
    return FallbackReason.CAPTURE_FAILED
