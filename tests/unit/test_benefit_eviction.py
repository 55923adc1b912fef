"""Measured times per key and the eviction policy ``benefit`` (issue 17), on the host backend and in
the simulator of tools/eviction_sim.py (the GPU's event sampling: tests/gpu/test_graph_tools.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
from repo_files import load_tool

import cupygraph as cg
from cupygraph.api.jit import GraphedFunction
from cupygraph.backends.host.backend import HostBackend
from cupygraph.cache import CUDAGraphRegistry
from cupygraph.cache.eviction import HighestBenefit, eviction_policy
from cupygraph.cache.instruments.timing import KeyTiming
from cupygraph.errors import ConfigError

HOST = dict(backend="host", capture_sizes=[2, 4, 8])


def only_entry(f):
    (entry,) = f.registry.entries()
    return entry


def test_with_sampling_off_replays_keep_the_class_launch_and_times_come_from_measurements():
    f = cg.jit(lambda x: x * 2, config=HOST)
    f(np.ones((4, 3)))
    entry = only_entry(f)
    # The hot path is the plain launch: no launch hook (no timer), whatever the replay strategy.
    assert entry._hooked is None and entry.strategy in ("copied", "bound", "bound_plain")
    timing = entry.timing
    assert entry.capture_time > 0
    assert timing.eager_s() is not None and timing.eager_s() > 0  # the warm-up run, timed
    assert timing.replay_s() is None  # not sampled


def test_no_warm_up_means_no_eager_time():
    f = cg.jit(lambda x: x * 2, config=dict(HOST, num_warmups=0))
    f(np.ones((4, 3)))
    assert only_entry(f).timing.eager_s() is None


def test_every_nth_replay_is_sampled():
    f = cg.jit(lambda x: x * 2, config=dict(HOST, replay_timing_every=3))
    x = np.ones((4, 3))
    for _ in range(10):
        np.testing.assert_array_equal(f(x), x * 2)
    timing = only_entry(f).timing
    assert timing.replay_s() > 0 and timing.replay_samples == 3  # launches 3, 6 and 9 (the capture's first)


class _SlowSample:
    """A device sample whose work has not finished until ``done`` is set."""

    made: ClassVar[list[_SlowSample]] = []

    def __init__(self):
        self.done = False
        _SlowSample.made.append(self)

    def stop(self):
        pass

    def seconds(self):
        return 0.25 if self.done else None


class _SlowClockBackend(HostBackend):
    def start_sample(self):
        return _SlowSample()


def test_a_sample_still_in_flight_is_never_waited_for_and_the_next_one_is_skipped():
    _SlowSample.made = []
    config = cg.CUDAGraphConfig(**HOST, replay_timing_every=2)
    f = GraphedFunction(lambda x: x + 1, registry=CUDAGraphRegistry(config, backend=_SlowClockBackend()))
    x = np.ones((4, 3))
    for _ in range(6):  # replays 2, 4 and 6 are due; 4 and 6 find the first still in flight
        f(x)
    timing = only_entry(f).timing
    assert len(_SlowSample.made) == 1 and timing.replay_s() is None
    _SlowSample.made[0].done = True
    assert timing.replay_s() == 0.25
    f(x), f(x)
    assert len(_SlowSample.made) == 2


def fake(replays, age, eager, replay, capture, nbytes=1000, now=100.0):
    timing = KeyTiming(SimpleNamespace(seconds=lambda: eager))
    if replay is not None:
        timing.replay_total_s, timing.replay_samples = replay, 1
    return SimpleNamespace(replay_count=replays, captured_at=now - age, last_used=now, nbytes=nbytes,
                           capture_time=capture, total_replay_s=0.0, timing=timing)


def test_benefit_values_saving_times_rate_plus_recapture_cost():
    policy = HighestBenefit(horizon_s=1.0, clock=lambda: 100.0)
    entry = fake(replays=30, age=2.0, eager=3e-3, replay=1e-3, capture=5e-3)
    assert policy.value(entry) == pytest.approx(30 / 3 * (2e-3 + 5e-3))
    no_warmup = fake(replays=30, age=2.0, eager=None, replay=1e-3, capture=5e-3)
    assert policy.value(no_warmup) == pytest.approx(10 * 5e-3)
    # Replays neither sampled nor timed (the defaults): no saving is assumed, replays are not free.
    unmeasured = fake(replays=30, age=2.0, eager=3e-3, replay=None, capture=5e-3)
    assert policy.value(unmeasured) == pytest.approx(10 * 5e-3)


def test_benefit_evicts_the_least_valuable_and_per_byte_under_a_memory_budget():
    hot_cheap = fake(replays=100, age=10, eager=1e-3, replay=9e-4, capture=1e-3, nbytes=10_000)
    warm_costly = fake(replays=20, age=10, eager=5e-3, replay=1e-3, capture=40e-3, nbytes=1000)
    cold = fake(replays=2, age=10, eager=1e-3, replay=5e-4, capture=20e-3, nbytes=1000)
    by_value = HighestBenefit(clock=lambda: 100.0)
    assert by_value.victim([hot_cheap, warm_costly, cold]) is cold
    assert by_value.victim([hot_cheap, warm_costly]) is hot_cheap  # fewer calls, but each saves far more
    per_byte = HighestBenefit(per_byte=True, clock=lambda: 100.0)
    assert per_byte.victim([hot_cheap, cold]) is hot_cheap  # 10x the bytes for less than 10x the value


def test_the_config_selects_benefit_and_checks_the_timing_field():
    assert cg.CUDAGraphConfig(eviction="Benefit").eviction == "benefit"
    assert isinstance(eviction_policy("benefit", per_byte=True), HighestBenefit)
    with pytest.raises(ConfigError, match="replay_timing_every"):
        cg.CUDAGraphConfig(replay_timing_every=-1)


def test_benefit_runs_a_budgeted_cache_and_results_stay_exact():
    f = cg.jit(lambda x: x * 3 + 1, config=dict(backend="host", capture_sizes=[1, 2, 4, 8, 16],
                                                   eviction="benefit", memory_budget=1200, replay_timing_every=2))
    rng = np.random.default_rng(0)
    for n in [16, 1, 1, 2, 1, 4, 1, 8, 1, 16, 2, 1] * 3:
        x = rng.standard_normal((n, 4))
        np.testing.assert_array_equal(f(x), x * 3 + 1)
    stats = f.stats()
    assert stats.evictions > 0 and f.registry.total_bytes() <= 1200
    assert stats.captures - stats.evictions == f.registry.num_graphs()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_a_skewed_trace_benefit_beats_lru_and_lfu_on_total_time(seed):
    sim = load_tool("eviction_sim")
    results = {r.policy: r for r in sim.compare(calls=6000, keys=40, budget=0.25, seed=seed)}
    assert results["benefit"].total_s < results["lru"].total_s
    assert results["benefit"].total_s < results["lfu"].total_s


def test_describe_shows_sampled_device_and_eager_times_only_when_sampling():
    sampled = cg.jit(lambda x: x * 2, config=dict(HOST, replay_timing_every=1))
    plain = cg.jit(lambda x: x * 2, config=HOST)
    for f in (sampled, plain):
        for _ in range(3):
            f(np.ones((4, 2)))
    header = sampled.describe().splitlines()[2]
    assert "replay (device)" in header and "eager" in header
    row = sampled.describe().splitlines()[4]
    assert row.count(" us") == 2  # device replay and eager: measured (the host replay time needs time_replays)
    assert "replay (device)" not in plain.describe()
