"""The one decision (issue 12): every front door gives a batch the same verdict and padded size.

The regression tests at the top use only names that existed before ``decide`` did, so each one
fails on the commit the issue reviewed (1b5ec47) for the disagreement it names, not for an import.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph import BatchDescriptor as BD
from cupygraph import CUDAGraphMode as Mode

HOST = {"backend": "host"}
SIZES = [1, 2, 4, 8, 16]


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3))


def triple(x):
    return x * 3.0 - 1.0


# -- regressions: the disagreements the issue lists ----------------------------------------------


def test_an_unbucketed_seq_len_is_dropped_from_every_key():
    """Regression: the dispatcher dropped a seq_len without buckets while registry.make_key kept it,
    so after execute_or_capture(3, 100, ...) should_capture(3, 100) stayed True and replay_graph raised."""
    manager = cg.CUDAGraphManager({"capture_sizes": SIZES, **HOST})
    x = rows(3)
    np.testing.assert_array_equal(manager.execute_or_capture(3, 100, triple, [x]), triple(x))
    assert not manager.should_capture(3, 100)
    assert not manager.should_capture(3)  # the same graph: seq_len is not a key axis
    y = rows(3, seed=1)
    np.testing.assert_array_equal(manager.replay_graph(3, 100, [y]), triple(y))
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(capture_sizes=SIZES, **HOST))
    key = registry.make_key(3, 100)
    assert key is not None and key.descriptor == BD(4)
    assert manager.registry.num_graphs() == 1


def test_min_tokens_for_graph_bounds_the_real_batch_everywhere():
    """Regression: the policy compared the padded size with min_tokens_for_graph, the config the real
    one: with min 4 a batch of 3 (padded to 4) replayed a graph under jit while the manager said NONE."""
    config = cg.CUDAGraphConfig(capture_sizes=SIZES, min_tokens_for_graph=4, **HOST)
    f = cg.jit(triple, config=config)
    for seed in range(3):
        x = rows(3, seed)
        np.testing.assert_array_equal(f(x), triple(x))
    assert f.registry.num_graphs() == 0 and f.stats().hits == 0 and f.stats().fallbacks == 3
    manager = cg.CUDAGraphManager(config)
    assert manager.get_mode_for_batch(3) is Mode.NONE
    manager.execute_or_capture(3, None, triple, [rows(3)])
    assert manager.registry.num_graphs() == 0
    assert not config.should_use_cudagraph(3)
    dispatcher = cg.CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(config.mode, 1)
    assert dispatcher.dispatch(BD(3)) == (Mode.NONE, None)
    # A batch at the limit is graphed by all of them.
    assert dispatcher.dispatch(BD(4)) == (Mode.FULL, BD(4))
    assert config.should_use_cudagraph(4) and manager.get_mode_for_batch(4) is Mode.FULL


def test_max_tokens_for_graph_bounds_the_real_batch_everywhere():
    """Regression: with max_tokens_for_graph=12, a batch of 10 (padded to 16) was 'graph' for the
    config and 'eager' for the dispatcher (and so for jit)."""
    config = cg.CUDAGraphConfig(capture_sizes=SIZES, max_tokens_for_graph=12, **HOST)
    dispatcher = cg.CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(config.mode, 1)
    assert config.should_use_cudagraph(10)
    assert dispatcher.dispatch(BD(10)) == (Mode.FULL, BD(16))
    f = cg.jit(triple, config=config)
    for seed in range(2):
        x = rows(10, seed)
        np.testing.assert_array_equal(f(x), triple(x))
    (entry,) = f.registry.entries()
    assert entry.key.descriptor == BD(16) and f.stats().hits == 1
    manager = cg.CUDAGraphManager(config)
    assert manager.get_mode_for_batch(10) is Mode.FULL and manager.get_mode_for_batch(13) is Mode.NONE
    assert not config.should_use_cudagraph(13) and dispatcher.dispatch(BD(13)) == (Mode.NONE, None)


def test_the_managers_two_apis_share_one_graph():
    """Regression: capture_graph and execute_or_capture kept separate graphs for the same function
    and batch, so the second call captured again instead of replaying."""
    manager = cg.CUDAGraphManager({"capture_sizes": SIZES, **HOST})
    entry = manager.capture_graph(5, None, triple, [(5, 3)], inputs=[rows(5)])
    assert entry.key.descriptor.num_tokens == 8
    x = rows(5, seed=7)
    # The first padded call runs the function as it is, to see which outputs carry the batch; then replays.
    for _ in range(2):
        np.testing.assert_array_equal(manager.execute_or_capture(5, None, triple, [x]), triple(x))
    stats = manager.stats()
    assert (stats.captures, stats.hits, manager.registry.num_graphs()) == (1, 1, 1)
    assert entry.replay_count == 1
    # The other way round: replay_graph replays what execute_or_capture captured.
    y = rows(12, seed=8)
    np.testing.assert_array_equal(manager.execute_or_capture(12, None, triple, [y]), triple(y))
    z = rows(11, seed=9)
    np.testing.assert_array_equal(manager.replay_graph(11, None, [z]), triple(z))
    assert manager.stats().captures == 2


def test_stream_dispatcher_runners_use_its_policy():
    """Regression: the runners built dispatchers of their own, so a veto-everything policy given to
    StreamDispatcher still let every run replay."""

    class NeverGraph(cg.DispatchPolicy):
        def should_use_graph(self, key, graph_available):
            return False

        def select_mode(self, key, available_modes):
            return Mode.NONE

    dispatcher = cg.StreamDispatcher(triple, num_streams=2, config={"capture_sizes": [4], **HOST}, policy=NeverGraph())
    requests = [(rows(4, seed),) for seed in range(6)]
    for (x,), out in zip(requests, dispatcher.run_batch(requests)):
        np.testing.assert_array_equal(out, triple(x))
    assert [runner.registry.num_graphs() for runner in dispatcher.runners] == [0, 0]
    assert sum(runner.stats().hits for runner in dispatcher.runners) == 0
    assert sum(runner.stats().fallbacks for runner in dispatcher.runners) == 6
    assert dispatcher.dispatch(BD(4)) == (Mode.NONE, None)


# -- the decision itself ---------------------------------------------------------------------------


def test_decisions_say_why_a_batch_runs_eagerly():
    from cupygraph.dispatch.decision import decide_for_config

    config = cg.CUDAGraphConfig(capture_sizes=[4, 8], seq_len_buckets=[64], min_tokens_for_graph=2, **HOST)
    cases = {
        BD(9): ("above_largest_capture_size", "batch of 9 is above the largest capture size 8"),
        BD(4, seq_len=65): (
            "seq_len_above_largest_bucket", "sequence length 65 is above the largest seq_len bucket 64"
        ),
        BD(1): ("outside_token_limits", "batch of 1 is below min_tokens_for_graph=2"),
    }
    for batch, (code, detail) in cases.items():
        decision = decide_for_config(config, batch)
        assert (decision.mode, decision.descriptor) == (Mode.NONE, None)
        assert (decision.reason.value, decision.detail) == (code, detail)
        assert decision.explain() == detail
    graphed = decide_for_config(config, BD(3, seq_len=10))
    assert tuple(graphed) == (Mode.FULL, BD(4, seq_len=64)) and graphed.reason is None
    assert graphed.graphed and graphed.padded == BD(4, seq_len=64)
    off = decide_for_config(cg.CUDAGraphConfig.disabled(), BD(3))
    assert off.reason is cg.FallbackReason.MODE_NONE and off.explain() == off.reason.text
    only_decode = decide_for_config(config.replace(mode="FULL_DECODE_ONLY"), BD(3))
    assert only_decode.reason is cg.FallbackReason.NO_GRAPH_MODE and "FULL_DECODE_ONLY" in only_decode.detail


def test_reasons_reach_the_statistics_of_jit():
    f = cg.jit(triple, config={"capture_sizes": [4, 8], "max_tokens_for_graph": 6, **HOST})
    for n in (7, 7, 9):
        f(rows(n))
    assert dict(f.stats().fallbacks_by_reason) == {"outside_token_limits": 2, "above_largest_capture_size": 1}
    assert f.stats().detail("outside_token_limits") == "batch of 7 is above max_tokens_for_graph=6"


def test_a_policy_veto_and_choice_are_reasons_too():
    from cupygraph.dispatch.decision import DispatchKeys, decide

    class PickNone(cg.DispatchPolicy):
        def should_use_graph(self, key, graph_available):
            return True

        def select_mode(self, key, available_modes):
            return Mode.NONE

    class Veto(PickNone):
        def should_use_graph(self, key, graph_available):
            return False

    config = cg.CUDAGraphConfig(capture_sizes=[4], **HOST)
    keys = DispatchKeys()
    keys.initialize(config, config.mode, 1)
    vetoed = decide(config, BD(3), keys, Veto())
    assert vetoed.reason is cg.FallbackReason.POLICY_VETO and vetoed.detail == f"Veto vetoed the graph for {BD(4)}"
    chose = decide(config, BD(3), keys, PickNone())
    assert chose.reason is cg.FallbackReason.POLICY_VETO and "chose NONE" in chose.detail and "FULL" in chose.detail


def test_policies_get_the_real_batch_for_limits_and_the_padded_key_for_choices():
    from cupygraph.dispatch.decision import DispatchKeys, decide

    seen = []

    class Recording(cg.DefaultDispatchPolicy):
        def should_use_graph(self, key, graph_available):
            seen.append(("use", key))
            return super().should_use_graph(key, graph_available)

        def select_mode(self, key, available_modes):
            seen.append(("select", key, tuple(available_modes)))
            return super().select_mode(key, available_modes)

    config = cg.CUDAGraphConfig(mode="FULL_AND_PIECEWISE", capture_sizes=[4, 8], **HOST)
    keys = DispatchKeys()
    keys.initialize(config, config.mode, 1)
    policy = Recording(min_tokens_for_graph=2, max_tokens_for_graph=5)
    assert tuple(decide(config, BD(5, 5, True), keys, policy)) == (Mode.FULL, BD(8, 8, True))
    assert seen == [("use", BD(8)), ("select", BD(8), (Mode.FULL, Mode.PIECEWISE))]
    seen.clear()
    assert decide(config, BD(6), keys, policy).reason is cg.FallbackReason.OUTSIDE_TOKEN_LIMITS
    assert seen == []  # outside the limits: the policy's choice is not asked


def test_decision_invariants_are_checked():
    from cupygraph.dispatch.decision import Decision

    with pytest.raises(ValueError, match="runtime mode"):
        Decision(Mode.FULL_AND_PIECEWISE, BD(4))
    with pytest.raises(ValueError, match="runs a graph"):
        Decision(Mode.FULL)
    with pytest.raises(ValueError, match="runs a graph"):
        Decision(Mode.NONE, BD(4), cg.FallbackReason.MODE_NONE)
    eager = Decision.eager(cg.FallbackReason.EMPTY_BATCH)
    with pytest.raises(ValueError, match="no padded descriptor"):
        _ = eager.padded


def test_config_answers_for_uniform_decode_batches_and_empty_ones():
    config = cg.CUDAGraphConfig(mode="FULL_DECODE_ONLY", capture_sizes=[2, 4, 8], max_num_reqs=2, **HOST)
    assert not config.should_use_cudagraph(3)  # a mixed batch: FULL_DECODE_ONLY runs it eagerly
    assert config.should_use_cudagraph(2, num_reqs=2, uniform_decode=True)
    assert not config.should_use_cudagraph(4, num_reqs=4, uniform_decode=True)  # above max_num_reqs
    assert not config.should_use_cudagraph(0)
    with pytest.raises(ValueError, match="batch_size"):
        config.should_use_cudagraph(-1)


def test_manager_decides_without_counting_and_names_the_reason():
    manager = cg.CUDAGraphManager({"capture_sizes": [4], **HOST})
    assert manager.decide(3).padded == BD(4)
    assert manager.get_mode_for_batch(9) is Mode.NONE and manager.dispatcher.dispatch_stats.total == 0
    with pytest.raises(cg.CupyGraphError, match="above the largest capture size 4"):
        manager.capture_graph(9, None, triple, [(9, 3)])
    with pytest.raises(cg.CupyGraphError, match="no graph to replay"):
        manager.replay_graph(9, None, [rows(9)])
    with pytest.raises(cg.CaptureError, match="shapes"):
        manager.capture_graph(3, None, triple, [(3, 3)], output_shapes=[(3, 4)])
    assert manager.registry.num_graphs() == 0


def test_replay_graph_refuses_to_guess_between_functions():
    manager = cg.CUDAGraphManager({"capture_sizes": [4], **HOST})
    x = rows(4)
    manager.execute_or_capture(4, None, triple, [x])
    manager.execute_or_capture(4, None, np.negative, [x])
    with pytest.raises(cg.CupyGraphError, match="cannot tell which"):
        manager.replay_graph(4, None, [x])
    manager.capture_graph(4, None, np.negative, [(4, 3)], inputs=[x])  # already held: not captured again
    assert manager.stats().captures == 2
    np.testing.assert_array_equal(manager.replay_graph(4, None, [x]), -x)


def test_stream_dispatcher_refuses_a_dispatcher_or_registry_for_its_runners():
    for name in ("dispatcher", "registry"):
        with pytest.raises(TypeError, match=name):
            cg.StreamDispatcher(triple, config=HOST, **{name: object()})


def test_manager_follows_cupygraph_disable_set_after_it_was_made(monkeypatch):
    import cupygraph.config.defaults

    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", True)  # keep the once-per-process log for others
    manager = cg.CUDAGraphManager({"capture_sizes": [4], **HOST})
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    assert manager.get_mode_for_batch(3) is Mode.NONE and not manager.should_capture(3)
    x = rows(3)
    np.testing.assert_array_equal(manager.execute_or_capture(3, None, triple, [x]), triple(x))
    assert manager.registry.num_graphs() == 0
    assert dict(manager.stats().fallbacks_by_reason) == {"mode_none": 1}
