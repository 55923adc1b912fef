"""Dispatch policies: token limits, mode preference, and the adaptive policy's latency verdicts."""

import threading

import pytest

from cupygraph.config.model import CUDAGraphConfig, CUDAGraphMode
from cupygraph.dispatch.descriptor import BatchDescriptor
from cupygraph.dispatch.policy import AdaptiveDispatchPolicy, DefaultDispatchPolicy, DispatchPolicy

NONE, PIECEWISE, FULL = CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL
BOTH = [FULL, PIECEWISE]


def test_dispatch_policy_is_abstract():
    with pytest.raises(TypeError):
        DispatchPolicy()  # type: ignore[abstract]


def test_default_uses_graph_only_when_available():
    policy = DefaultDispatchPolicy()
    assert policy.should_use_graph(BatchDescriptor(8), True)
    assert not policy.should_use_graph(BatchDescriptor(8), False)


@pytest.mark.parametrize("n, expected", [(3, False), (4, True), (16, True), (17, False)])
def test_default_token_limits_bound_the_real_batch(n, expected):
    policy = DefaultDispatchPolicy(min_tokens_for_graph=4, max_tokens_for_graph=16)
    assert policy.token_limits() == (4, 16)
    assert policy.within_limits(BatchDescriptor(n)) is expected
    # The limits are not applied again to the padded key should_use_graph is asked with: a batch
    # of 16 padded to a 32-row graph stays within them.
    assert policy.should_use_graph(BatchDescriptor(n), True)


def test_a_policy_without_limits_admits_every_batch():
    class Always(DispatchPolicy):
        def should_use_graph(self, key, graph_available):
            return graph_available

        def select_mode(self, key, available_modes):
            return FULL

    assert Always().token_limits() == (1, None)
    assert Always().within_limits(BatchDescriptor(10**6))


def test_default_prefers_full_then_piecewise_then_none():
    policy = DefaultDispatchPolicy()
    key = BatchDescriptor(8)
    assert policy.select_mode(key, BOTH) is FULL
    assert policy.select_mode(key, [PIECEWISE, FULL]) is FULL
    assert policy.select_mode(key, [PIECEWISE]) is PIECEWISE
    assert policy.select_mode(key, []) is NONE
    assert policy.select_mode(key, [NONE]) is NONE


def test_prefer_piecewise_only_when_available():
    policy = DefaultDispatchPolicy(prefer_piecewise=True)
    key = BatchDescriptor(8)
    assert policy.select_mode(key, BOTH) is PIECEWISE
    assert policy.select_mode(key, [FULL]) is FULL


def test_from_config_copies_the_limits():
    config = CUDAGraphConfig(min_tokens_for_graph=2, max_tokens_for_graph=64, prefer_piecewise=True)
    policy = DefaultDispatchPolicy.from_config(config)
    assert (policy.min_tokens_for_graph, policy.max_tokens_for_graph, policy.prefer_piecewise) == (2, 64, True)
    adaptive = AdaptiveDispatchPolicy.from_config(config, history_size=10)
    assert isinstance(adaptive, AdaptiveDispatchPolicy)
    assert (adaptive.history_size, adaptive.max_tokens_for_graph) == (10, 64)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"min_tokens_for_graph": 0}, "min_tokens_for_graph"),
        ({"max_tokens_for_graph": -1}, "max_tokens_for_graph"),
        ({"min_tokens_for_graph": 8, "max_tokens_for_graph": 4}, "below"),
    ],
)
def test_default_rejects_bad_limits(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DefaultDispatchPolicy(**kwargs)


# -- adaptive ----------------------------------------------------------------------------------


def feed(policy, key, mode, latencies):
    for latency in latencies:
        policy.record(key, mode, latency)


def test_adaptive_behaves_like_default_without_history():
    policy = AdaptiveDispatchPolicy(min_tokens_for_graph=4)
    assert policy.should_use_graph(BatchDescriptor(8), True)
    assert not policy.within_limits(BatchDescriptor(2)) and policy.within_limits(BatchDescriptor(4))
    assert policy.select_mode(BatchDescriptor(8), BOTH) is FULL


def test_adaptive_stops_choosing_a_graph_slower_than_eager():
    policy = AdaptiveDispatchPolicy(min_samples=3)
    key = BatchDescriptor(8)
    feed(policy, key, NONE, [1.0, 1.1, 0.9])
    feed(policy, key, FULL, [2.0, 2.1])
    # Two FULL samples are too few for a verdict: still the default behaviour.
    assert policy.should_use_graph(key, True)
    assert policy.select_mode(key, [FULL]) is FULL
    policy.record(key, FULL, 1.9)
    assert policy.slower_than_eager(key, FULL)
    assert policy.select_mode(key, [FULL]) is NONE
    assert policy.select_mode(key, BOTH) is PIECEWISE  # not measured yet: still worth a try
    feed(policy, key, PIECEWISE, [3.0, 3.0, 3.0])
    assert not policy.should_use_graph(key, True)
    assert policy.select_mode(key, BOTH) is NONE
    # Other keys are unaffected.
    assert policy.should_use_graph(BatchDescriptor(16), True)


def test_adaptive_keeps_a_graph_faster_than_eager():
    policy = AdaptiveDispatchPolicy(min_samples=3)
    key = BatchDescriptor(8)
    feed(policy, key, NONE, [1.0, 1.0, 1.0, 1.0])
    feed(policy, key, FULL, [0.2, 0.3, 0.25])
    assert not policy.slower_than_eager(key, FULL)
    assert policy.should_use_graph(key, True)
    assert policy.select_mode(key, BOTH) is FULL


def test_adaptive_uses_the_median_not_the_mean():
    policy = AdaptiveDispatchPolicy(min_samples=3)
    key = BatchDescriptor(8)
    feed(policy, key, NONE, [1.0, 1.0, 1.0])
    feed(policy, key, FULL, [0.5, 0.5, 100.0])  # one outlier, mean 33.7, median 0.5
    assert policy.median_latency(key, FULL) == 0.5
    assert policy.select_mode(key, [FULL]) is FULL


def test_adaptive_falls_back_to_the_other_graph_mode():
    policy = AdaptiveDispatchPolicy(min_samples=2)
    key = BatchDescriptor(8)
    feed(policy, key, NONE, [1.0, 1.0])
    feed(policy, key, FULL, [3.0, 3.0])
    assert policy.select_mode(key, BOTH) is PIECEWISE
    feed(policy, key, PIECEWISE, [0.5, 0.5])
    # PIECEWISE measured faster: graphs still pay off for this key.
    assert policy.should_use_graph(key, True)
    assert policy.select_mode(key, BOTH) is PIECEWISE


def test_adaptive_history_is_bounded_and_recovers():
    policy = AdaptiveDispatchPolicy(history_size=4, min_samples=2)
    key = BatchDescriptor(8)
    feed(policy, key, NONE, [1.0] * 4)
    feed(policy, key, FULL, [5.0] * 4)
    assert policy.select_mode(key, [FULL]) is NONE
    feed(policy, key, FULL, [0.1] * 4)  # pushes every slow sample out
    assert policy.num_samples(key, FULL) == 4
    assert policy.median_latency(key, FULL) == pytest.approx(0.1)
    assert policy.select_mode(key, [FULL]) is FULL


def test_adaptive_reset_forgets():
    policy = AdaptiveDispatchPolicy(min_samples=1)
    key = BatchDescriptor(8)
    policy.record(key, NONE, 1.0)
    policy.record(key, FULL, 2.0)
    policy.record(key, PIECEWISE, 2.0)
    assert not policy.should_use_graph(key, True)
    policy.reset()
    assert policy.should_use_graph(key, True)
    assert policy.median_latency(key, FULL) is None


@pytest.mark.parametrize(
    "mode, latency", [("FULL_AND_PIECEWISE", 1.0), (FULL, -1.0), (FULL, float("nan")), (FULL, True)]
)
def test_adaptive_record_rejects_bad_input(mode, latency):
    policy = AdaptiveDispatchPolicy()
    with pytest.raises(ValueError):
        policy.record(BatchDescriptor(8), mode, latency)


def test_adaptive_rejects_unreachable_min_samples():
    with pytest.raises(ValueError, match="min_samples"):
        AdaptiveDispatchPolicy(history_size=2, min_samples=3)


def test_adaptive_record_is_thread_safe():
    policy = AdaptiveDispatchPolicy(history_size=10_000)
    key = BatchDescriptor(8)

    def worker():
        for _ in range(1000):
            policy.record(key, FULL, 1.0)
            policy.should_use_graph(key, True)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert policy.num_samples(key, FULL) == 8000
