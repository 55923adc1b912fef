"""Every class and function the seeds name exists with its documented methods (one coherent design)."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

SEED_SURFACE = {
    "CUDAGraphMode": ["has_graphs", "has_full_cudagraphs"],
    "CUDAGraphConfig": ["should_use_cudagraph", "get_padded_batch_size", "to_dict", "from_dict", "disabled"],
    "CUDAGraphEntry": ["replay", "avg_replay_time_ms", "increment_replay"],
    "CUDAGraphRegistry": ["capture", "get", "has", "remove", "clear", "num_graphs", "stats"],
    "CUDAGraphManager": ["mode", "is_enabled", "should_capture", "get_mode_for_batch", "capture_graph",
                         "replay_graph", "execute_or_capture", "stats"],
    "BatchDescriptor": ["__hash__", "relaxed"],
    "CUDAGraphStats": ["hit_rate"],
    "MockCUDAGraph": ["capture_begin", "capture_end", "replay"],
    "CUDAGraphWrapper": ["__getattr__", "unwrap", "__call__", "_capture", "_replay", "_cache_entry", "_evict_lru",
                         "_get_input_addresses", "get_cached_descriptors"],
    "AdaptiveCUDAGraphWrapper": ["__call__", "_evict_lru", "get_hot_shapes", "prewarm"],
    "DispatchStats": ["graph_ratio"],
    "DispatchPolicy": ["should_use_graph", "select_mode"],
    "DefaultDispatchPolicy": ["should_use_graph", "select_mode"],
    "AdaptiveDispatchPolicy": ["record", "should_use_graph", "select_mode"],
    "CudagraphDispatcher": ["add_cudagraph_key", "initialize_cudagraph_keys", "dispatch", "register_graph",
                            "has_graph", "get_graph", "_replay_graph", "_replay_piecewise", "stats",
                            "clear_cache", "enable_mode"],
    "CompositeDispatcher": ["add_dispatcher", "dispatch"],
    "StreamDispatcher": ["_select_stream", "dispatch"],
}
FUNCTIONS = ["cudagraph_context", "get_cudagraph_sizes", "create_dispatch_key", "get_padded_key"]


@pytest.mark.parametrize("name", sorted(SEED_SURFACE))
def test_seed_class_has_its_methods(name):
    cls = getattr(cg, name)
    missing = [m for m in SEED_SURFACE[name] if not hasattr(cls, m)]
    assert not missing, f"{name} lacks {missing}"


def test_seed_functions_and_aliases():
    for name in FUNCTIONS:
        assert callable(getattr(cg, name))
    assert cg.DispatchKey is cg.BatchDescriptor and cg.GraphEntry is cg.CUDAGraphEntry
    assert cg.DispatchMode is cg.CUDAGraphMode


def test_mock_graph_enforces_the_protocol():
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


def test_dispatcher_replays_registered_graphs_and_piecewise_entries():
    dispatcher = cg.CudagraphDispatcher(cg.CUDAGraphConfig(backend="host", max_capture_size=8))
    mock = cg.MockCUDAGraph()
    mock.capture_begin()
    mock.capture_end()
    dispatcher.register_graph(cg.BatchDescriptor(4), mock, [0x1000])
    dispatcher._replay_graph(dispatcher.get_graph(cg.BatchDescriptor(4)))
    assert mock.replays == 1
    with pytest.raises(TypeError, match="neither launch"):
        dispatcher._replay_graph(object())
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", max_capture_size=8))
    calls = []
    entry = registry.capture(3, None, lambda x: calls.append(1) or x * 2, [(3, 2)], mode=cg.CUDAGraphMode.PIECEWISE,
                             inputs=[np.ones((3, 2))])
    before = len(calls)
    dispatcher._replay_piecewise(entry)
    assert len(calls) == before + 1
    full = registry.capture(5, None, lambda x: x, [(5, 2)], inputs=[np.ones((5, 2))])
    with pytest.raises(ValueError, match="PIECEWISE"):
        dispatcher._replay_piecewise(full)
