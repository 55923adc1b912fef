"""Statistics count reasons by a fixed set of codes; the variable detail is kept bounded."""

from __future__ import annotations

import json

import numpy as np

import cupygraph as cg
from cupygraph.reasons import reason_of_capture_failure


def test_two_thousand_oversized_batch_sizes_keep_one_reason_key():
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", max_capture_size=8))
    for rows in range(9, 2009):
        f(np.zeros((rows, 1), np.float32))
    stats = f.stats()
    assert stats.fallbacks == 2000
    assert dict(stats.fallbacks_by_reason) == {"above_largest_capture_size": 2000}
    assert stats.last_detail_by_reason == {
        "above_largest_capture_size": "batch of 2008 is above the largest capture size 8"
    }
    data = stats.to_dict()
    assert len(json.dumps(data)) < 2000  # JSON-able, and small whatever the traffic
    assert data["last_detail_by_reason"] == stats.last_detail_by_reason


def test_cold_keys_and_evictions_are_counted_by_code_too():
    f = cg.jit(lambda x: x * 2, config=dict(backend="host", capture_after=2, max_cached_graphs=1,
                                            capture_sizes=list(range(1, 65))))
    for rows in range(1, 65):
        for _ in range(2):
            f(np.ones((rows, 1)))
    stats = f.stats()
    assert dict(stats.fallbacks_by_reason) == {"cold_key": 64}
    assert dict(stats.evictions_by_reason) == {"max_cached_graphs": 63}
    assert set(stats.last_detail_by_reason) == {"cold_key", "max_cached_graphs"}


def test_codes_have_text_and_are_unique_across_kinds():
    codes = [r.value for kind in (cg.FallbackReason, cg.EvictionReason, cg.RecaptureReason) for r in kind]
    assert len(codes) == len(set(codes))
    for kind in (cg.FallbackReason, cg.EvictionReason, cg.RecaptureReason):
        for reason in kind:
            assert reason.text and reason.text != reason.value
    assert cg.FallbackReason.ABOVE_LARGEST == "above_largest_capture_size"  # usable as a dict key


def test_a_capture_failure_message_maps_back_to_its_code():
    text = cg.FallbackReason.LIBRARY_CALL.text
    assert reason_of_capture_failure(f"{text}: cuBLAS (at m.py:3: y = x @ w)") is cg.FallbackReason.LIBRARY_CALL
    assert reason_of_capture_failure("something else") is cg.FallbackReason.CAPTURE_FAILED


def test_stats_detail_falls_back_to_the_codes_text():
    stats = cg.CUDAGraphStats()
    stats.record_fallback(cg.FallbackReason.MODE_NONE)
    assert stats.detail("mode_none") == cg.FallbackReason.MODE_NONE.text
    other = cg.CUDAGraphStats()
    other.record_eviction(cg.EvictionReason.CLEARED, "cleared by clear()")
    stats.merge(other)
    assert stats.evictions_by_reason == {"cleared": 1} and stats.detail("cleared") == "cleared by clear()"
