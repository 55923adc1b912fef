"""The seeds' surface, by behaviour: every class and function the seeds name (the auto-generated
docs of an earlier design and of vLLM's dispatcher, ``shared/seeds/``) is public in cupygraph and
does what its documentation says, called through the public API on the host backend.

Seed methods with a leading underscore (the wrappers' ``_capture``/``_replay``/``_cache_entry``/
``_evict_lru``/``_get_input_addresses``, ``StreamDispatcher._select_stream``, the dispatcher's
``_replay_graph``/``_replay_piecewise``) are implementation: their behaviour is checked through
the public calls that use them (capture then replay, eviction, the address check, round robin over
streams, FULL and PIECEWISE replays), not by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph import BatchDescriptor as BD
from cupygraph import CUDAGraphMode as Mode

HOST = {"backend": "host"}
SEED_CLASSES = [
    "DispatchMode", "DispatchKey", "DispatchStats", "DispatchPolicy", "DefaultDispatchPolicy",
    "AdaptiveDispatchPolicy", "GraphEntry", "CudagraphDispatcher", "CompositeDispatcher", "StreamDispatcher",
    "CUDAGraphMode", "CUDAGraphConfig", "CUDAGraphEntry", "CUDAGraphRegistry", "CUDAGraphManager",
    "BatchDescriptor", "CUDAGraphOptions", "CUDAGraphStats", "MockCUDAGraph", "CUDAGraphWrapper",
    "AdaptiveCUDAGraphWrapper",
]
SEED_FUNCTIONS = ["create_dispatch_key", "get_padded_key", "cudagraph_context", "get_cudagraph_sizes"]


def rows(n: int, seed: int = 0, width: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width))


def affine(x):
    return x * 3.0 - 1.0


def test_every_seed_name_is_public():
    missing = [name for name in SEED_CLASSES + SEED_FUNCTIONS if name not in cg.__all__]
    assert not missing, f"named by the seeds but not exported: {missing}"
    # One design: the seeds' second names are the same objects, not copies.
    assert cg.DispatchMode is cg.CUDAGraphMode and cg.DispatchKey is cg.BatchDescriptor
    assert cg.GraphEntry is cg.CUDAGraphEntry


def test_modes_say_which_graphs_they_use():
    assert [m.has_graphs() for m in Mode] == [m is not Mode.NONE for m in Mode]
    full = {m for m in Mode if m.has_full_cudagraphs()}
    assert full == {Mode.FULL, Mode.FULL_DECODE_ONLY, Mode.FULL_AND_PIECEWISE}


def test_batch_descriptors_are_keys_and_the_key_helpers_build_them():
    a, b = BD(8, 4, uniform_decode=True), BD(8, 4, uniform_decode=True)
    assert hash(a) == hash(b) and len({a: 1, b: 2}) == 1
    assert a.relaxed() == BD(8) and a.relaxed() != a
    decode = cg.create_dispatch_key(num_tokens=6, num_reqs=6, max_seq_len=128, is_prefill=False)
    assert decode == BD(6, 6, uniform_decode=True, seq_len=128) and not decode.is_prefill
    assert cg.get_padded_key(decode, 8) == BD(8, 6, uniform_decode=True, seq_len=128)
    with pytest.raises(ValueError, match="pad_to=4 is smaller"):
        cg.get_padded_key(decode, 4)


def test_get_cudagraph_sizes_follows_the_mode_and_limits():
    default = cg.get_cudagraph_sizes(None, None, 512, Mode.FULL)
    assert default == [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    assert cg.get_cudagraph_sizes([1, 2, 4, 8, 16], None, 8, Mode.PIECEWISE) == [1, 2, 4, 8]
    assert cg.get_cudagraph_sizes([1, 2, 4, 8, 16], 4, None, Mode.FULL_DECODE_ONLY) == [1, 2, 4]
    assert cg.get_cudagraph_sizes([1, 2, 4], None, None, Mode.NONE) == []


def test_config_pads_decides_and_round_trips():
    config = cg.CUDAGraphConfig(capture_sizes=[2, 4, 8], seq_len_buckets=[64, 128], **HOST)
    assert [config.get_padded_batch_size(n) for n in (1, 3, 8, 9)] == [2, 4, 8, None]
    assert config.should_use_cudagraph(5, seq_len=100) and not config.should_use_cudagraph(9)
    assert not config.should_use_cudagraph(5, seq_len=200)  # above the largest bucket
    again = cg.CUDAGraphConfig.from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict() and again.cudagraph_capture_sizes == (2, 4, 8)
    off = cg.CUDAGraphConfig.disabled()
    assert off.mode is Mode.NONE and not off.should_use_cudagraph(1)


def test_registry_captures_finds_replays_and_drops_graphs_by_batch_size():
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(capture_sizes=[4, 8], **HOST))
    entry = registry.capture(3, None, affine, [(3, 3)], output_shapes=[(3, 3)], inputs=[rows(3)])
    assert entry.key.descriptor == BD(4) and registry.get(3) is entry and registry.get(4) is entry
    assert registry.has(4) and not registry.has(5) and registry.num_graphs() == 1
    for seed, n in [(1, 2), (2, 4), (3, 3)]:  # fresh data on every replay, fewer rows than captured too
        x = rows(n, seed)
        np.testing.assert_array_equal(entry.replay([x]), affine(x))
    assert entry.replay_count >= 3 and entry.avg_replay_time_ms >= 0.0
    entry.increment_replay()
    assert entry.replay_count >= 4
    assert registry.remove(3) and not registry.has(3) and not registry.remove(3)
    registry.capture(7, None, affine, [(7, 3)], inputs=[rows(7)])
    registry.clear()
    assert registry.num_graphs() == 0
    stats = registry.stats()
    assert (stats.captures, stats.evictions) == (2, 2)  # removed and cleared graphs count as evictions


def test_manager_captures_replays_and_switches_modes():
    manager = cg.CUDAGraphManager({"capture_sizes": [4, 8], **HOST})
    assert manager.is_enabled() and manager.mode is Mode.FULL
    assert manager.get_mode_for_batch(5) is Mode.FULL and manager.get_mode_for_batch(9) is Mode.NONE
    assert manager.should_capture(5)
    manager.capture_graph(5, None, affine, [(5, 3)], inputs=[rows(5)])
    assert not manager.should_capture(5)
    x = rows(6, seed=4)
    np.testing.assert_array_equal(manager.replay_graph(6, None, [x]), affine(x))
    for n in (3, 8, 11):  # 11 is above the largest size: eager, with the reason counted
        y = rows(n, seed=n)
        np.testing.assert_array_equal(manager.execute_or_capture(n, None, affine, [y]), affine(y))
    stats = manager.stats()
    assert stats.fallbacks == 1 and stats.hits >= 1 and 0.0 < stats.hit_rate() < 1.0
    manager.mode = "PIECEWISE"
    assert manager.mode is Mode.PIECEWISE and manager.get_mode_for_batch(5) is Mode.PIECEWISE
    manager.mode = Mode.NONE
    assert not manager.is_enabled() and manager.get_mode_for_batch(5) is Mode.NONE


def test_stats_hit_rate_counts_replays_of_graphs_that_existed():
    f = cg.jit(affine, config={"capture_sizes": [4], **HOST})
    for seed in range(4):
        x = rows(4, seed)
        np.testing.assert_array_equal(f(x), affine(x))
    stats = f.stats()
    assert isinstance(stats, cg.CUDAGraphStats) and (stats.hits, stats.misses) == (3, 1)
    assert stats.hit_rate() == 0.75


def test_mock_graph_enforces_the_capture_protocol():
    g = cg.MockCUDAGraph()
    with pytest.raises(RuntimeError, match="before any capture"):
        g.replay()
    g.capture_begin()
    with pytest.raises(RuntimeError, match="still open"):
        g.replay()
    g.capture_end()
    g.replay()
    g.launch()
    assert (g.captures, g.replays) == (1, 2)
    with pytest.raises(RuntimeError, match="without capture_begin"):
        g.capture_end()


class Layer:
    """A runnable with an attribute, as a model layer has."""

    scale = 3.0

    def __call__(self, x):
        return x * self.scale - 1.0


def test_wrapper_captures_under_the_context_then_replays_on_the_same_arrays():
    layer = Layer()
    wrapper = cg.CUDAGraphWrapper(layer, Mode.FULL, cg.CUDAGraphOptions(debug=True), backend=cg.HostBackend())
    assert wrapper.unwrap() is layer and wrapper.scale == 3.0  # attributes pass through to the runnable
    x = rows(4)
    np.testing.assert_array_equal(wrapper(x), layer(x))  # no context: the runnable runs directly
    assert wrapper.stats().calls == 0
    with cg.cudagraph_context(Mode.FULL, BD(4)) as context:
        assert cg.get_forward_context() is context
        first = wrapper(x).copy()
        x[...] = rows(4, seed=1)  # the contract: new data written in place into the captured arrays
        second = wrapper(x)
        np.testing.assert_array_equal(second, layer(x))
        assert not np.array_equal(first, second)
        with pytest.raises(cg.InputMismatchError, match="input addresses changed"):
            wrapper(rows(4, seed=2))  # another array: the debug check names the addresses
    assert cg.get_forward_context().mode is Mode.NONE
    stats = wrapper.stats()
    assert (stats.captures, stats.hits) == (1, 1) and wrapper.get_cached_descriptors() == [BD(4)]


def test_wrapper_keeps_at_most_max_cached_graphs_evicting_the_least_recent():
    wrapper = cg.CUDAGraphWrapper(affine, Mode.FULL, max_cached_graphs=2, backend=cg.HostBackend())
    inputs = {n: rows(n, seed=n) for n in (2, 4, 8)}
    for n in (2, 4, 2, 8):
        with cg.cudagraph_context(Mode.FULL, BD(n)):
            np.testing.assert_array_equal(wrapper(inputs[n]), affine(inputs[n]))
    assert wrapper.get_cached_descriptors() == [BD(2), BD(8)]  # 4 was the least recently used
    assert wrapper.stats().evictions == 1


def test_adaptive_wrapper_captures_hot_shapes_only_and_evicts_the_coldest():
    wrapper = cg.AdaptiveCUDAGraphWrapper(affine, Mode.FULL, max_cached_graphs=2, capture_after=2,
                                          backend=cg.HostBackend())
    inputs = {n: rows(n, seed=n) for n in (2, 4, 8)}
    for n in (2, 2, 2, 2, 4, 4, 8, 8):
        with cg.cudagraph_context(Mode.FULL, BD(n)):
            np.testing.assert_array_equal(wrapper(inputs[n]), affine(inputs[n]))
    assert wrapper.get_hot_shapes(1) == [(BD(2), 4)]
    assert dict(wrapper.get_hot_shapes()) == {BD(2): 4, BD(4): 2, BD(8): 2}
    # Each shape ran eagerly once (cold), then captured; 8 evicted 4, the entry with fewer replays.
    assert wrapper.stats().fallbacks == 3 and wrapper.get_cached_descriptors() == [BD(2), BD(8)]
    assert wrapper.prewarm([16, BD(2)], lambda d: rows(d.num_tokens, seed=99)) == 1  # 2 is held already
    assert BD(16) in wrapper.get_cached_descriptors()


def test_dispatch_policies_veto_and_choose_modes():
    key = BD(8)
    default = cg.DefaultDispatchPolicy(min_tokens_for_graph=4, max_tokens_for_graph=16, prefer_piecewise=False)
    assert default.should_use_graph(key, True) and not default.should_use_graph(key, False)
    # Token limits bound the real batch (decide checks them before padding), not the padded key.
    assert not default.within_limits(BD(2)) and not default.within_limits(BD(32)) and default.within_limits(key)
    assert default.select_mode(key, [Mode.PIECEWISE, Mode.FULL]) is Mode.FULL
    assert cg.DefaultDispatchPolicy(prefer_piecewise=True).select_mode(key, [Mode.FULL, Mode.PIECEWISE]) \
        is Mode.PIECEWISE
    adaptive = cg.AdaptiveDispatchPolicy(history_size=10)
    assert adaptive.select_mode(key, [Mode.FULL, Mode.PIECEWISE]) is Mode.FULL
    for _ in range(3):  # FULL measured slower than eager for this key: the policy stops picking it
        adaptive.record(key, Mode.FULL, 2.0)
        adaptive.record(key, Mode.NONE, 1.0)
    assert adaptive.select_mode(key, [Mode.FULL, Mode.PIECEWISE]) is Mode.PIECEWISE
    assert adaptive.should_use_graph(key, True)  # PIECEWISE is still unmeasured

    class NeverGraph(cg.DispatchPolicy):
        def should_use_graph(self, key, graph_available):
            return False

        def select_mode(self, key, available_modes):
            return Mode.NONE

    with pytest.raises(TypeError):
        cg.DispatchPolicy()  # abstract
    vetoed = cg.CudagraphDispatcher(cg.CUDAGraphConfig(capture_sizes=[8], **HOST), policy=NeverGraph())
    vetoed.initialize_cudagraph_keys(Mode.FULL, 1)
    assert vetoed.dispatch(BD(5)) == (Mode.NONE, None)


def test_dispatcher_keys_decide_and_registered_graphs_are_found():
    dispatcher = cg.CudagraphDispatcher(cg.CUDAGraphConfig(mode="FULL_AND_PIECEWISE", capture_sizes=[4, 8], **HOST))
    assert dispatcher.dispatch(BD(3)) == (Mode.NONE, None)  # no keys yet: nothing is replayable
    dispatcher.initialize_cudagraph_keys(Mode.FULL_AND_PIECEWISE, uniform_decode_query_len=1)
    assert dispatcher.dispatch(BD(3)) == (Mode.PIECEWISE, BD(4))
    assert dispatcher.dispatch(BD(3, 3, uniform_decode=True)) == (Mode.FULL, BD(4, 4, uniform_decode=True))
    assert dispatcher.dispatch(BD(9)) == (Mode.NONE, None)
    dispatcher.add_cudagraph_key(Mode.FULL, BD(8))
    assert dispatcher.dispatch(BD(7)) == (Mode.FULL, BD(8))
    assert dispatcher.dispatch(BD(7), use_cascade_attn=True) == (Mode.PIECEWISE, BD(8))
    stats = dispatcher.stats()
    assert (stats["total"], stats["none"]) == (6, 2) and stats["graph_ratio"] == pytest.approx(4 / 6)
    assert isinstance(dispatcher.dispatch_stats, cg.DispatchStats)

    graph = cg.MockCUDAGraph()
    graph.capture_begin()
    graph.capture_end()
    assert not dispatcher.has_graph(BD(4)) and dispatcher.get_graph(BD(4)) is None
    dispatcher.register_graph(BD(4), graph, input_ptrs=[0x1000])
    assert dispatcher.has_graph(BD(4)) and dispatcher.get_graph(BD(4)) is graph
    assert dispatcher.dispatch(BD(2)) == (Mode.FULL, BD(4))  # a registered graph makes its key dispatchable
    dispatcher.clear_cache()
    assert not dispatcher.has_graph(BD(4)) and dispatcher.dispatch(BD(2)) == (Mode.PIECEWISE, BD(4))
    dispatcher.enable_mode(Mode.FULL)
    assert dispatcher.dispatch(BD(3)) == (Mode.FULL, BD(4))


def test_full_and_piecewise_entries_replay_what_eager_computes():
    # The dispatcher's replay of FULL and PIECEWISE entries, through the manager that owns them.
    # A matrix product is refused in FULL (as cuBLAS is under CuPy's capture): PIECEWISE runs it
    # eagerly between the pieces, FULL gets an elementwise op.
    ops = {"FULL": lambda x: x * 1.5, "PIECEWISE": cg.graph_break(lambda x: x @ np.full((3, 3), 0.5))}
    for mode, op in ops.items():
        manager = cg.CUDAGraphManager({"mode": mode, "capture_sizes": [4], **HOST})

        def layer(x, op=op):
            return np.tanh(op(x + 1.0))

        for seed in range(3):
            x = rows(4, seed)
            np.testing.assert_array_equal(manager.execute_or_capture(4, None, layer, [x]), layer(x))
        assert manager.stats().replays_by_mode == {mode: 2}  # the first call captured, running it as it is


def test_composite_dispatcher_asks_by_priority_and_falls_through():
    small = cg.CudagraphDispatcher(cg.CUDAGraphConfig(capture_sizes=[4], **HOST))
    large = cg.CudagraphDispatcher(cg.CUDAGraphConfig(capture_sizes=[64], **HOST))
    for d in (small, large):
        d.initialize_cudagraph_keys(Mode.FULL, 1)
    composite = cg.CompositeDispatcher()
    composite.add_dispatcher("large", large, priority=0)
    composite.add_dispatcher("small", small, priority=1)
    assert tuple(composite.dispatch(BD(3))) == (Mode.FULL, BD(4), "small")
    decision = composite.dispatch(BD(30))
    assert tuple(decision) == (Mode.FULL, BD(64), "large") and decision.asked == ("small", "large")
    assert tuple(composite.dispatch(BD(100))) == (Mode.NONE, None, None)


def test_stream_dispatcher_spreads_requests_over_its_streams():
    dispatcher = cg.StreamDispatcher(affine, num_streams=3, config={"capture_sizes": [4], **HOST})
    requests = [(rows(4, seed),) for seed in range(6)]
    for (x,), out in zip(requests, dispatcher.run_batch(requests)):
        np.testing.assert_array_equal(out, affine(x))
    stats = dispatcher.stats()
    assert [s["calls"] for s in stats["streams"]] == [2, 2, 2]  # round robin
    # The top-level graph counters are the streams' together (the runners hold the graphs)
    assert stats["calls"] == 6 and stats["captures"] == sum(s["captures"] for s in stats["streams"]) == 3
    assert dispatcher.dispatch(BD(3)) == (Mode.FULL, BD(4))
