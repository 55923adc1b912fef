"""CUDAGraphRegistry on the host backend: the seed's capture API, padding, entries, eviction, stats."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cupygraph as cg
from cupygraph import CaptureError, CUDAGraphConfig, CUDAGraphRegistry, GraphKey
from cupygraph.cache.key import Signature, StaticArg
from cupygraph.dispatch.descriptor import BatchDescriptor

SIZES = [1, 2, 4, 8, 16]
D = 5


def make_registry(**fields) -> CUDAGraphRegistry:
    fields.setdefault("capture_sizes", SIZES)
    return CUDAGraphRegistry(CUDAGraphConfig(backend="host", **fields))


def rand(rows: int, seed: int = 0, d: int = D) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, d))


def identity(x):
    return x


def double(x):
    return x * 2


def capture(registry: CUDAGraphRegistry, rows: int, fn=double, seed: int = 0):
    return registry.capture(rows, None, fn, [(rows, D)], inputs=[rand(rows, seed)])


def held_sizes(registry: CUDAGraphRegistry) -> set[int]:
    return {e.key.descriptor.num_tokens for e in registry.entries()}


# -- the seed API ---------------------------------------------------------------------------------


def test_capture_pads_to_capture_size_and_replays():
    registry = make_registry()
    x = rand(3)
    entry = registry.capture(3, None, double, [(3, D)], [(3, D)], inputs=[x])
    assert entry.key.descriptor == BatchDescriptor(4)
    assert entry.batch_descriptor.num_tokens == 4
    assert entry.static_inputs[0].shape == (4, D)
    for rows, seed in [(3, 1), (1, 2), (4, 3), (2, 4)]:
        y = rand(rows, seed)
        out = entry.replay([y])
        assert out.shape == (rows, D)
        assert np.array_equal(out, y * 2)


def test_get_has_remove_num_graphs():
    registry = make_registry()
    entry = capture(registry, 3)
    assert registry.num_graphs() == len(registry) == 1
    # Every batch size that pads to 4 finds the same entry.
    assert registry.get(3) is entry and registry.get(4) is entry
    assert registry.has(4) and not registry.has(2) and not registry.has(5)
    assert registry.get(17) is None and not registry.has(17)  # above the largest capture size
    assert registry.remove(2) is False
    assert registry.remove(3) is True
    assert registry.num_graphs() == 0 and not registry.has(4)
    assert registry.remove(4) is False


def test_capture_of_an_existing_key_returns_the_entry():
    registry = make_registry()
    first = capture(registry, 3)
    assert capture(registry, 4, fn=identity) is first
    assert registry.num_graphs() == 1


def test_clear_drops_graphs_keeps_stats():
    registry = make_registry(max_cached_graphs=1)
    capture(registry, 1)
    capture(registry, 2)
    assert registry.stats().evictions == 1
    registry.clear()
    assert registry.num_graphs() == 0 and registry.total_bytes() == 0
    assert not registry.has(1) and not registry.has(2)
    # Graphs dropped by clear() count as evictions, so captures - evictions == graphs held.
    assert registry.stats().evictions == 2
    assert registry.stats().evictions_by_reason["cleared"] == 1
    assert registry.stats().captures - registry.stats().evictions == registry.num_graphs()


def test_every_graph_that_leaves_counts_as_an_eviction():
    """Regression: clear() and remove()/remove_key() dropped graphs uncounted, breaking
    captures - evictions == graphs held."""
    registry = make_registry()
    for rows in (1, 2, 4, 8):
        capture(registry, rows)
    assert registry.remove(2) and registry.remove_key(registry.get(4).key)
    assert not registry.remove(2)  # nothing left to remove: nothing counted
    stats = registry.stats()
    assert stats.captures - stats.evictions == registry.num_graphs() == 2
    assert stats.evictions_by_reason == {"removed": 2}
    assert stats.last_detail_by_reason["removed"] == "removed by remove_key()"


def test_capture_above_largest_size_raises():
    registry = make_registry()
    with pytest.raises(CaptureError, match="above the largest capture size 16"):
        registry.capture(17, None, double, [(17, D)])
    assert registry.num_graphs() == 0


def test_output_shapes_are_checked():
    registry = make_registry()
    words = f"outputs of shapes [(3, {D})] for batch_size=3, but output_shapes says [(3, {D + 1})]"
    with pytest.raises(CaptureError, match=re.escape(words)):
        registry.capture(3, None, double, [(3, D)], [(3, D + 1)], inputs=[rand(3)])
    with pytest.raises(CaptureError, match="outputs of shapes"):  # the real batch's shapes, not the trailing ones
        registry.capture(3, None, double, [(3, D)], [(D,)], inputs=[rand(3)])
    assert registry.num_graphs() == 0


def test_capture_and_the_managers_capture_graph_check_their_inputs_alike():
    # One place (``seed_inputs``) reads input_shapes for both: the same words for the same mistake.
    registry, manager = make_registry(), cg.CUDAGraphManager(cg.CUDAGraphConfig(backend="host", max_capture_size=16))
    for bad, words in (([(4, D)], f"input_shapes[0] is (4, {D}), whose leading axis is not batch_size=3"),
                       ([(3, D + 1)], f"input 0 has shape (3, {D}), expected (3, {D + 1}) (input_shapes[0])")):
        for capture in (registry.capture, manager.capture_graph):
            with pytest.raises((ValueError, cg.InputMismatchError), match=re.escape(words)):
                capture(3, None, double, bad, inputs=[rand(3)])
    assert registry.num_graphs() == 0 and manager.registry.num_graphs() == 0


def test_input_shapes_with_dtype_and_no_inputs_start_as_pad_value():
    registry = make_registry(pad_value=7)
    entry = registry.capture(3, None, identity, [((3, 2), "int32")])
    buf = entry.static_inputs[0]
    assert buf.dtype == np.int32 and buf.shape == (4, 2)
    assert np.all(buf == 7)


@pytest.mark.parametrize("pad_value", [0, -3.5])
def test_padding_rows_hold_pad_value(pad_value):
    registry = make_registry(pad_value=pad_value)
    x = rand(5)
    entry = registry.capture(5, None, identity, [(5, D)], inputs=[x])
    static_out = entry.recording.outputs  # the function returns its (padded) input
    assert static_out.shape == (8, D)
    assert np.array_equal(static_out[:5], x)
    assert np.all(static_out[5:] == pad_value)
    # A replay with fewer rows pads again from the new real size.
    y = rand(2, seed=9)
    assert np.array_equal(entry.replay([y]), y)
    assert np.array_equal(entry.recording.outputs[:2], y)
    assert np.all(entry.recording.outputs[2:] == pad_value)
    # And a bigger batch after a smaller one overwrites the old padding with data.
    z = rand(7, seed=10)
    assert np.array_equal(entry.replay([z]), z)
    assert np.array_equal(entry.recording.outputs[:7], z)
    assert np.all(entry.recording.outputs[7:] == pad_value)


def test_padding_rewritten_after_another_graph_of_the_family_ran():
    # Graphs of one signature share input buffers: the size-4 graph writes rows the size-8 graph pads.
    registry = make_registry()
    big = registry.capture(5, None, identity, [(5, D)], inputs=[rand(5)])
    small = registry.capture(4, None, identity, [(4, D)], inputs=[rand(4, 1)])
    assert np.array_equal(big.replay([rand(2, 2)]), rand(2, 2))
    assert np.array_equal(small.replay([rand(4, 3)]), rand(4, 3))
    out = big.replay([rand(2, 2)])
    assert np.array_equal(out, rand(2, 2))
    assert np.all(big.recording.outputs[2:] == 0)


def test_replay_rejects_mismatched_inputs():
    registry = make_registry()
    entry = capture(registry, 3)
    from cupygraph import InputMismatchError

    with pytest.raises(InputMismatchError, match="does not fit"):
        entry.replay([rand(5)])
    with pytest.raises(InputMismatchError):
        entry.replay([rand(3, d=D + 1)])
    with pytest.raises(InputMismatchError):
        entry.replay([rand(3).astype(np.float32)])
    with pytest.raises(InputMismatchError, match="takes 1 batched inputs, got 2"):
        entry.replay([rand(3), rand(3)])


def test_entry_reports_nbytes_replays_time_backend():
    registry = make_registry(time_replays=True)
    entry = capture(registry, 3)
    assert entry.backend_name == "host"
    assert entry.replay_count == 0 and entry.avg_replay_time_ms == 0.0
    static_bytes = 4 * D * 8
    # The static input and the static output of x * 2 (both float64[4, D]).
    assert entry.nbytes == 2 * static_bytes
    assert registry.total_bytes() == entry.nbytes
    for i in range(3):
        entry.replay([rand(2, i)])
    assert entry.replay_count == 3
    assert entry.avg_replay_time_ms > 0.0
    assert entry.total_replay_s * 1e3 / 3 == pytest.approx(entry.avg_replay_time_ms)
    assert "host" in repr(entry)


def test_replays_read_no_clock_unless_timed():
    entry = capture(make_registry(), 3)
    for i in range(3):
        entry.replay([rand(2, i)])
    assert entry.replay_count == 3
    assert entry.avg_replay_time_ms == 0.0 and entry.total_replay_s == 0.0


def test_get_hot_shapes_orders_by_sightings():
    registry = make_registry()
    k4, k8, k1 = (GraphKey(BatchDescriptor(n)) for n in (4, 8, 1))
    for key, times in ((k4, 3), (k8, 5), (k1, 1)):
        for i in range(times):
            assert registry.count_sighting(key) == i + 1
    # Keys that differ only in signature count toward the same descriptor.
    registry.count_sighting(GraphKey(BatchDescriptor(4), signature=Signature((StaticArg(str, "other"),))))
    hot = registry.get_hot_shapes()
    assert hot == [(BatchDescriptor(8), 5), (BatchDescriptor(4), 4), (BatchDescriptor(1), 1)]
    assert registry.get_hot_shapes(top_k=1) == [(BatchDescriptor(8), 5)]


# -- eviction ---------------------------------------------------------------------------------------


def test_lru_evicts_least_recently_used():
    registry = make_registry(max_cached_graphs=2)
    capture(registry, 1)
    capture(registry, 2)
    assert registry.get(1) is not None  # 1 is now the most recently used
    capture(registry, 4)
    assert held_sizes(registry) == {1, 4}
    stats = registry.stats()
    assert stats.evictions == 1
    assert stats.evictions_by_reason == {"max_cached_graphs": 1}
    assert stats.detail("max_cached_graphs") == "max_cached_graphs=2 reached"


def test_lru_replay_through_lookup_refreshes():
    registry = make_registry(max_cached_graphs=2)
    capture(registry, 1)
    capture(registry, 2)
    capture(registry, 4)  # evicts 1
    assert held_sizes(registry) == {2, 4}
    registry.lookup(GraphKey(BatchDescriptor(2)))
    capture(registry, 8)  # evicts 4, not 2
    assert held_sizes(registry) == {2, 8}


def test_has_does_not_refresh_lru_order():
    registry = make_registry(max_cached_graphs=2)
    capture(registry, 1)
    capture(registry, 2)
    assert registry.has(1)
    capture(registry, 4)
    assert held_sizes(registry) == {2, 4}


def test_lfu_evicts_least_replayed_even_if_recently_used():
    registry = make_registry(max_cached_graphs=2, eviction="lfu")
    a = capture(registry, 1)
    b = capture(registry, 2)
    for i in range(3):
        a.replay([rand(1, i)])
    b.replay([rand(2)])  # b is the most recently used but the least replayed
    capture(registry, 4)
    assert held_sizes(registry) == {1, 4}


def test_lru_with_same_history_would_evict_the_other_one():
    # The same history as the LFU test, under LRU: the least recently used goes instead.
    registry = make_registry(max_cached_graphs=2, eviction="lru")
    a = capture(registry, 1)
    b = capture(registry, 2)
    for i in range(3):
        a.replay([rand(1, i)])
        registry.lookup(a.key)
    b.replay([rand(2)])
    registry.lookup(b.key)
    capture(registry, 4)
    assert held_sizes(registry) == {2, 4}


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_min_replays_to_keep_protects_hot_entries(eviction):
    registry = make_registry(max_cached_graphs=2, eviction=eviction, min_replays_to_keep=2)
    hot = capture(registry, 1)
    hot.replay([rand(1)])
    hot.replay([rand(1, 1)])
    cold = capture(registry, 2)
    cold.replay([rand(2)])
    registry.lookup(cold.key)  # hot is LRU, cold has fewer replays than min_replays_to_keep
    capture(registry, 4)
    assert held_sizes(registry) == {1, 4}
    # When only hot entries are left, one of them goes after all.
    newest = registry.get(4)
    for i in range(2):
        newest.replay([rand(4, i)])
    capture(registry, 8)
    assert registry.num_graphs() == 2 and 8 in held_sizes(registry)


def test_memory_budget_evicts_to_stay_under():
    entry_bytes = 2 * 4 * D * 8  # input + output of x * 2 at 4 rows, float64
    registry = make_registry(memory_budget=2 * entry_bytes + entry_bytes // 2)
    capture(registry, 3)
    capture(registry, 4, fn=identity, seed=1)  # same key: no new entry
    capture(registry, 2)
    assert registry.num_graphs() == 2 and registry.stats().evictions == 0
    capture(registry, 8)  # 640 bytes: the LRU graph (4 rows) has to go
    # The graph for 2 rows reads a view of the 4-row static buffer, which stays alive (and counted)
    # while it is held, so it goes too: static buffers count once, at their real size.
    assert held_sizes(registry) == {8}
    assert registry.total_bytes() <= registry.config.memory_budget
    assert registry.stats().evictions == 2
    assert set(registry.stats().evictions_by_reason) == {"memory_budget"}
    assert registry.stats().detail("memory_budget") == f"memory_budget={registry.config.memory_budget} bytes reached"


def test_entry_alone_above_memory_budget_raises_and_keeps_others():
    registry = make_registry(memory_budget=1000)
    capture(registry, 1)
    capture(registry, 2)
    held = held_sizes(registry)
    with pytest.raises(CaptureError, match="memory_budget=1000"):
        capture(registry, 16)  # 2 * 16 * 5 * 8 bytes
    assert held_sizes(registry) == held
    assert not registry.has(16)
    assert registry.stats().evictions == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from(range(1, 17)), min_size=1, max_size=25),
    limit=st.integers(1, 5),
    eviction=st.sampled_from(["lru", "lfu"]),
    keep=st.integers(0, 2),
    replays=st.lists(st.integers(0, 3), min_size=25, max_size=25),
)
def test_max_cached_graphs_never_exceeded(sizes, limit, eviction, keep, replays):
    registry = make_registry(max_cached_graphs=limit, eviction=eviction, min_replays_to_keep=keep)
    captured = 0
    for i, n in enumerate(sizes):
        before = registry.entries()
        entry = capture(registry, n, seed=i)
        if all(entry is not e for e in before):
            captured += 1
        for j in range(replays[i]):
            entry.replay([rand(n, j)])
        assert registry.num_graphs() <= limit
        stats = registry.stats()
        assert captured - stats.evictions == registry.num_graphs()
        assert sum(stats.evictions_by_reason.values()) == stats.evictions
    assert set(registry.stats().evictions_by_reason) <= {"max_cached_graphs"}


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from(range(1, 17)), min_size=1, max_size=25),
    budget=st.integers(100, 1500),
    eviction=st.sampled_from(["lru", "lfu"]),
)
def test_memory_budget_never_exceeded(sizes, budget, eviction):
    registry = make_registry(memory_budget=budget, eviction=eviction)
    captured = 0
    for i, n in enumerate(sizes):
        before = registry.entries()
        padded = registry.config.get_padded_batch_size(n)
        try:
            entry = capture(registry, n, seed=i)
        except CaptureError as err:
            assert 2 * padded * D * 8 > budget  # only an entry above the budget on its own is refused
            assert f"memory_budget={budget}" in str(err)
            assert registry.entries() == before
        else:
            if all(entry is not e for e in before):
                captured += 1
        assert registry.total_bytes() <= budget
        stats = registry.stats()
        assert captured - stats.evictions == registry.num_graphs()
        assert sum(stats.evictions_by_reason.values()) == stats.evictions


def test_stats_captures_minus_evictions_is_graphs_held():
    registry = make_registry(max_cached_graphs=2)
    for n in (1, 2, 4, 8):
        capture(registry, n)
    stats = registry.stats()
    assert stats.evictions == 2
    assert stats.captures - stats.evictions == registry.num_graphs()


@pytest.mark.parametrize("with_inputs", [True, False], ids=["inputs given", "inputs filled"])
def test_capture_by_batch_size_refuses_a_pad_value_its_inputs_cannot_hold(with_inputs):
    """``registry.capture`` and ``CUDAGraphManager.capture_graph`` pad (and, without inputs, fill) with
    ``pad_value`` as a call would: a value the dtype cannot hold is refused naming the input, not
    rounded (2.7 -> 2) or raised as NumPy's own error."""
    from cupygraph.errors import InputMismatchError

    registry = CUDAGraphRegistry(CUDAGraphConfig(backend="host", pad_value=2.7, capture_sizes=[4]))
    inputs = {"inputs": [np.ones((3, 2), np.int32)]} if with_inputs else {}
    with pytest.raises(InputMismatchError, match=r"pad_value=2\.7.*input 0 \(input_shapes\[0\], int32\)"):
        registry.capture(3, None, lambda x: x * 2, [((3, 2), "int32")], **inputs)
    assert registry.num_graphs() == 0
    manager = cg.CUDAGraphManager(CUDAGraphConfig(backend="host", pad_value=-1, capture_sizes=[4]))
    with pytest.raises(InputMismatchError, match=r"pad_value=-1.*uint8"):
        manager.capture_graph(3, None, lambda x: x * 2, [((3, 2), "uint8")])
