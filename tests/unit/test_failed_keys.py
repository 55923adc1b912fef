"""Keys whose capture or replay failed are remembered: they run eagerly (or raise), never retry
on every call, and never return a stale or wrongly shaped result (host backend)."""

from __future__ import annotations

import collections
import logging

import numpy as np
import pytest

import cupygraph as cg

HOST = dict(backend="host", max_capture_size=16)


def rand(rows, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, 3))


# -- data-dependent output shapes ---------------------------------------------------------------------------


def test_data_dependent_shape_falls_back_on_every_later_call_and_never_raises():
    fn = lambda x: x[x > 0]
    f = cg.jit(fn, config=dict(HOST, on_capture_error="fallback"))
    for seed in range(6):
        x = rand(5, seed)
        assert np.array_equal(f(x), fn(x))  # other lengths each call: eager, with the reason
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"data_dependent_shape": 6} and stats.capture_failures == 1
    assert "boolean-mask indexing" in stats.detail("data_dependent_shape")


# -- a host replay that returns something else than the capture --------------------------------------------


def test_a_replay_with_another_output_shape_marks_the_key_failed_and_runs_eagerly(caplog):
    state = {"extra": 0}

    def fn(x):  # Python state the graph cannot see changes the output's shape
        return np.concatenate([x, x[:, :1].repeat(state["extra"], axis=1)], axis=1)

    f = cg.jit(fn, config=HOST)
    x = rand(3)
    assert np.array_equal(f(x), fn(x))
    state["extra"] = 2
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        for seed in (1, 2):
            y = rand(3, seed)
            got = f(y)
            assert got.shape == (3, 5) and np.array_equal(got, fn(y))
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"replay_mismatch": 2}
    assert stats.evictions_by_reason == {"failed_replay": 1} and f.registry.num_graphs() == 0
    assert stats.captures - stats.evictions == f.registry.num_graphs()
    assert stats.hits + stats.misses == stats.calls == 3
    assert any("runs eagerly from now on" in r.getMessage() for r in caplog.records)


def test_a_replay_with_another_structure_or_python_value_is_not_returned_stale():
    state = {"calls": 0}

    def counted(x):
        state["calls"] += 1
        return x * 2, state["calls"]  # a Python value the graph would freeze

    f = cg.jit(counted, config=HOST)
    x = rand(3)
    first = f(x)
    second = f(x)
    assert first[1] != second[1]  # never the capture's value again
    assert np.array_equal(first[0], x * 2) and np.array_equal(second[0], x * 2)
    # The first call's own run already differed from the capture: both calls ran eagerly.
    assert f.stats().fallbacks_by_reason == {"replay_mismatch": 2} and f.registry.num_graphs() == 0
    assert "output 1 of counted() is 1 at 3 rows, 3 in the graph" in f.stats().detail("replay_mismatch")

    shape = {"dict": False}
    g = cg.jit(lambda x: {"y": x} if shape["dict"] else (x,), config=HOST)
    g(x)
    shape["dict"] = True
    assert isinstance(g(x), dict) and g.stats().fallbacks_by_reason == {"replay_mismatch": 1}


def test_a_replay_mismatch_raises_under_raise():
    state = {"extra": 0}
    f = cg.jit(lambda x: x[:, : 3 - state["extra"]], config=dict(HOST, on_capture_error="raise"))
    f(rand(3))
    state["extra"] = 1
    with pytest.raises(cg.CaptureError, match=r"cannot replay .* shape"):
        f(rand(3))
    with pytest.raises(cg.CaptureError, match="failed before"):
        f(rand(3))


# -- exceptions during warm-up, capture or output handling (issue 19) --------------------------------------


class Pair(collections.namedtuple("Pair", "a b")):
    """A namedtuple whose constructor takes one argument: it cannot be rebuilt from its fields."""

    def __new__(cls, both):
        return super().__new__(cls, both, both * 2)


def test_an_output_that_cannot_be_rebuilt_is_one_capture_failure_then_eager():
    fn = lambda x: Pair(x + 1)
    f = cg.jit(fn, config=HOST)
    for seed in range(4):
        x = rand(3, seed)
        got = f(x)
        assert isinstance(got, Pair) and np.array_equal(got.b, fn(x).b)
    stats = f.stats()
    assert (stats.capture_failures, stats.fallbacks, stats.captures) == (1, 4, 0)
    assert stats.fallbacks_by_reason == {"exception_during_capture": 4}
    assert "TypeError" in stats.detail("exception_during_capture")


def test_an_exception_only_on_the_padded_buffers_falls_back_once_per_key():
    def fn(x):
        if x.shape[0] == 4:  # only the padded static buffer has 4 rows
            raise ValueError("four rows are not supported")
        return x * 2

    f = cg.jit(fn, config=HOST)
    for seed in range(4):
        x = rand(3, seed)
        assert np.array_equal(f(x), x * 2)
    stats = f.stats()
    assert (stats.capture_failures, stats.fallbacks) == (1, 4)
    detail = stats.detail("raised_on_padding")  # it works at the real batch: the padded batch made it raise
    assert "ValueError: four rows are not supported" in detail and "(at test_failed_keys.py:" in detail
    strict = cg.jit(fn, config=dict(HOST, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match="ValueError: four rows"):
        strict(rand(3))


def test_an_exception_in_the_warmup_is_remembered():
    state = {"calls": 0}

    def fn(x):
        state["calls"] += 1
        if state["calls"] == 2:  # the second run is the warm-up on the static buffers (the call's own is first)
            raise RuntimeError("the warm-up only")
        return x + 1

    f = cg.jit(fn, config=dict(HOST, num_warmups=1))
    for _ in range(4):
        f(rand(3))
    assert f.stats().capture_failures == 1 and f.stats().fallbacks == 4
    assert state["calls"] == 5  # the call and its warm-up, then three eager calls: no capture retried


def test_a_bug_in_the_function_reaches_the_caller_every_call_as_without_jit():
    def buggy(x):
        return x * {"scale": 2}["scael"]

    for on_error in ("fallback", "raise"):
        f = cg.jit(buggy, config=dict(HOST, on_capture_error=on_error))
        for _ in range(3):
            with pytest.raises(KeyError, match="scael"):
                f(rand(3))
        # The call that would capture runs the function as it is first: its exception stops the call
        # there, so nothing is captured, retried on every call as a plain call would fail again.
        assert f.stats().capture_failures == 0 and f.stats().captures == 0, on_error


def test_clear_forgets_failed_keys_so_they_are_tried_again():
    fails = {"on": True}

    def fn(x):
        if fails["on"] and x.shape[0] == 4:
            raise ValueError("not yet")
        return x - 1

    f = cg.jit(fn, config=HOST)
    f(rand(3))
    f(rand(3))
    assert f.stats().capture_failures == 1 and f.registry.num_graphs() == 0
    fails["on"] = False
    f.clear()
    f(rand(3))
    assert f.registry.num_graphs() == 1 and f.stats().capture_failures == 1 and f.stats().captures == 1


def test_refused_keys_under_raise_are_not_captured_again():
    f = cg.jit(lambda x: x * float(x.sum()), config=dict(HOST, on_capture_error="raise"))
    for _ in range(3):
        with pytest.raises(cg.CaptureError, match="device-to-host"):
            f(rand(3))
    assert f.stats().capture_failures == 1
    with pytest.raises(cg.CaptureError, match="device-to-host"):
        f(rand(9))  # another key (16 rows) fails on its own, once
    assert f.stats().capture_failures == 2
