"""Calls that come back into cupygraph from inside a jitted function's own call (host backend)."""

from __future__ import annotations

import numpy as np
from replay_helpers import replayed

import cupygraph

CONFIG = {"backend": "host", "max_capture_size": 16}


def _consistent(graphed: cupygraph.GraphedFunction) -> None:
    stats = graphed.stats()
    assert stats.hits + stats.misses == stats.calls, stats.to_dict()
    assert stats.captures - stats.evictions == graphed.registry.num_graphs(), stats.to_dict()


def test_a_function_clearing_its_own_graphs_during_its_replay_still_returns_its_result() -> None:
    # The host replay runs the function, which drops the graph being replayed: the call must run eagerly
    # (no AttributeError from the dropped shortcut, no key remembered as failed) and the next call capture again.
    @cupygraph.jit(config=CONFIG)
    def clears_itself(x: np.ndarray) -> np.ndarray:
        clears_itself.clear()
        return x * 3

    rng = np.random.default_rng(0)
    for rows in [3, 4, 3, 3, 5, 3]:
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        np.testing.assert_array_equal(clears_itself(x), x * 3)
        _consistent(clears_itself)
    assert clears_itself.stats().fallbacks_by_reason.get("replay_mismatch", 0) >= 1  # the replays that were cut off
    assert not clears_itself.registry.family_lock._is_owned()


def test_a_graph_evicted_by_a_capture_its_own_replay_makes_is_not_a_failed_key() -> None:
    # Two functions on one registry that holds one graph: once f is captured, its host replay calls g, whose
    # capture evicts f's graph while f runs.
    registry = cupygraph.CUDAGraphRegistry(cupygraph.CUDAGraphConfig(**CONFIG, max_cached_graphs=1))
    g_calls = []

    def body(x: np.ndarray) -> np.ndarray:
        if registry.num_graphs() and not g_calls:  # f's first replay (a capture run holds no graph yet)
            g_calls.append(len(x))
            return g(x) * 2
        return (x - 1) * 2

    g = cupygraph.GraphedFunction(lambda x: x - 1, registry=registry, namespace="g")
    f = cupygraph.GraphedFunction(body, registry=registry, namespace="f")
    rng = np.random.default_rng(1)
    for rows in [3, 3, 3, 5, 3]:
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        np.testing.assert_array_equal(f(x), (x - 1) * 2)
    assert g_calls and f.stats().evictions_by_reason.get("max_cached_graphs", 0) >= 1  # the check could fail
    x = rng.standard_normal((3, 4)).astype(np.float32)
    f(x)
    got, hit = replayed(f, x)  # the key whose replay was cut off captures and replays again
    assert hit and f.stats().fallbacks_by_reason == {"replay_mismatch": 1}, f.stats().to_dict()
    np.testing.assert_array_equal(got, (x - 1) * 2)
    _consistent(f)
    assert not registry.family_lock._is_owned()


def test_a_jitted_function_calling_another_jitted_function_returns_the_composed_result() -> None:
    inner = cupygraph.jit(lambda x: x * 2 + 1, config=CONFIG)
    outer = cupygraph.jit(lambda x: inner(x) - 3, config=CONFIG)
    rng = np.random.default_rng(2)
    for rows in [3, 4, 3, 5, 3]:
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        np.testing.assert_array_equal(outer(x), x * 2 + 1 - 3)
    _consistent(outer)
    _consistent(inner)


def test_a_jitted_function_called_while_another_is_recorded_runs_inline_and_captures_nothing() -> None:
    """As ``jax.jit`` inlines a nested jit: the inner function's kernels join the outer graph, so the inner one
    captures only for the calls it gets outside any recording (the outer's first call runs as it is)."""
    inner = cupygraph.jit(lambda x: x * 2 + 1, config=CONFIG)
    outer = cupygraph.jit(lambda x: inner(x) - 3, config=CONFIG)
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(outer(x), x * 2 + 1 - 3)
    assert outer.stats().captures == 1
    captured_by_the_first_run = inner.stats().captures  # the outer's run as it is called it plainly
    for _ in range(3):
        np.testing.assert_array_equal(outer(x), x * 2 + 1 - 3)
    assert inner.stats().captures == captured_by_the_first_run
    assert not cupygraph.cache.recording_here()
