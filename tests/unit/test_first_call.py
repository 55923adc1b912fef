"""The first call of a key behaves as the plain function (issue 27), on the host backend.

The call that captures a key runs the function as it is (its result, writes and draws are the
call's), so the warm-ups and the capture add nothing the plain call would not do: a write into a
constant or closure array happens once per call, legacy ``np.random`` draws what a plain call
draws, and the first padded call shows which outputs carry the batch on their leading axis. The
GPU variants are in ``tests/gpu/test_first_call_gpu.py``.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import cupygraph as cg

HOST = dict(backend="host", capture_sizes=[4, 8])


def rand(rows, cols=3, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols))


# -- writes into arrays the function reads by address ------------------------------------------------------


def bump(x, w):
    w += 1  # a constant argument, written in place
    return x * w


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE"])
@pytest.mark.parametrize("num_warmups", [0, 1, 2])
@pytest.mark.parametrize("rows", [4, 3])
def test_a_write_into_a_constant_happens_once_per_call(num_warmups, rows, mode):
    f = cg.jit(bump, config=dict(HOST, num_warmups=num_warmups, mode=mode), constant_argnums=(1,))
    w, w_plain = np.zeros(3), np.zeros(3)
    for call in range(4):
        x = rand(rows, seed=call)
        np.testing.assert_array_equal(f(x, w), bump(x, w_plain))
        np.testing.assert_array_equal(w, w_plain)  # w == call + 1, as without jit
    stats = f.stats()
    assert stats.captures == 1 and stats.hits == 3 and stats.fallbacks == 0, stats.to_dict()


def test_a_write_into_a_closure_array_happens_once_per_call(caplog):
    hits = np.zeros(1)

    def counted(x):
        hits[...] += 1  # reached through the closure, written by address
        return x + hits

    f = cg.jit(counted, config=dict(HOST, num_warmups=2))
    with pytest.warns(cg.ForeignMemoryWarning, match="hits"), caplog.at_level(logging.INFO, logger="cupygraph"):
        for call in range(1, 4):
            np.testing.assert_array_equal(f(rand(3)), rand(3) + call)
            assert hits[0] == call
    assert f.stats().hits == 2
    assert any("closure variable 'hits'" in r.getMessage() and "runs no warm-up" in r.getMessage()
               for r in caplog.records)


def test_warm_ups_still_run_where_the_call_writes_nothing_outside_its_copies():
    runs = []

    def fn(x, w):
        runs.append(x.shape[0])
        x *= 2  # a copied argument: the static copy takes the write, replays write it back
        return x + w

    f = cg.jit(fn, config=dict(HOST, num_warmups=2), constant_argnums=(1,))
    w = np.ones(3)
    x, x_plain = rand(3), rand(3)
    want = fn(x_plain, w)
    runs.clear()
    np.testing.assert_array_equal(f(x, w), want)
    np.testing.assert_array_equal(x, x_plain)
    assert runs == [3, 4, 4, 4]  # the call itself (3 rows), two warm-ups and the capture run (4 rows)
    y, y_plain = rand(3, seed=1), rand(3, seed=1)
    np.testing.assert_array_equal(f(y, w), fn(y_plain, w))
    np.testing.assert_array_equal(y, y_plain)  # written back from the static copy
    assert f.stats().hits == 1


# -- the batch axis of padded outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("fn, shape", [
    (lambda x: x.T, [3, 3]),
    (lambda x: np.concatenate([x, x]), [6, 3]),
    (lambda x: x.reshape(-1), [9]),
], ids=["transpose", "concatenate", "reshape"])
def test_an_output_whose_batch_axis_is_not_leading_makes_padded_calls_run_eagerly(fn, shape):
    f = cg.jit(fn, config=HOST)
    for call in range(3):
        x = rand(3, seed=call)
        got = f(x)
        assert list(got.shape) == shape and np.array_equal(got, fn(x))
    x = rand(4, seed=9)  # a capture size: nothing to cut, the graph replays
    np.testing.assert_array_equal(f(x), fn(x))
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"batch_axis_not_leading": 3} and stats.hits == 1
    detail = stats.detail("batch_axis_not_leading")
    assert f"output 0 of <lambda>() has shape {shape} at the real batch of 3 rows" in detail
    assert "in its graph for 4 rows" in detail and "capture size (4 rows" in detail


def test_a_key_captured_unpadded_or_by_warmup_checks_its_first_padded_call():
    calls = []

    def fn(x):
        calls.append(x.shape[0])
        return x.T

    f = cg.jit(fn, config=HOST)
    f.warmup(rand(1), sizes=[8], progress=False)
    np.testing.assert_array_equal(f(rand(8)), rand(8).T)  # exact: replays
    calls.clear()
    np.testing.assert_array_equal(f(rand(5)), rand(5).T)
    assert calls == [5]  # the check: the function as it is, at the real batch
    np.testing.assert_array_equal(f(rand(5, seed=1)), rand(5, seed=1).T)
    assert f.stats().fallbacks_by_reason == {"batch_axis_not_leading": 2} and f.stats().hits == 1


def test_unbatched_outputs_as_long_as_the_padded_batch_are_not_cut():
    fn = lambda x: (x.sum(axis=0), x.mean(axis=0, keepdims=True), x * 2)
    f = cg.jit(fn, config=HOST)
    for call in range(3):
        x = rand(5, cols=8, seed=call)  # pads to 8 rows: the column sums are 8 long too
        total, mean, doubled = f(x)
        assert (total.shape, mean.shape, doubled.shape) == ((8,), (1, 8), (5, 8))
        np.testing.assert_array_equal(doubled, x * 2)
        np.testing.assert_allclose(total, x.sum(axis=0), rtol=1e-12)  # padding rows are zeros
    assert f.stats().hits == 2 and f.registry.entries()[0].batched_outputs == (False, False, True)


def test_a_plain_value_that_depends_on_the_batch_size_runs_the_key_eagerly():
    fn = lambda x: (x * 2, x.shape[0])
    f = cg.jit(fn, config=HOST)
    for rows in (3, 3, 4):
        got = f(rand(rows))
        assert got[1] == rows and np.array_equal(got[0], rand(rows) * 2)
    assert f.stats().fallbacks_by_reason == {"replay_mismatch": 3} and f.registry.num_graphs() == 0
    assert "output 1 of <lambda>() is 3 at 3 rows, 4 in the graph" in f.stats().detail("replay_mismatch")


def test_out_batched_must_agree_with_what_the_first_padded_call_shows():
    fn = lambda x: (x.sum(axis=0), x * 2)
    x = rand(5, cols=8)
    agreed = cg.jit(fn, config=HOST, out_batched=(False, True))
    assert [a.shape for a in agreed(x)] == [(8,), (5, 8)]
    cut = cg.jit(fn, config=HOST, out_batched=(True, True))
    with pytest.raises(cg.InputMismatchError, match=r"output 0 of <lambda>\(\) is declared batched in out_batched"):
        cut(x)
    uncut = cg.jit(lambda x: x * 2, config=HOST, out_batched=False)
    with pytest.raises(cg.InputMismatchError, match=r"declared unbatched .* changes with the batch"):
        uncut(rand(3))
    assert uncut(rand(4)).shape == (4, 3)  # a capture size: nothing is cut, nothing to check


# -- legacy global generators ----------------------------------------------------------------------------


def noisy(x):
    return x + np.random.standard_normal(x.shape)


@pytest.mark.parametrize("num_warmups", [0, 1, 2])
@pytest.mark.parametrize("rows", [4, 3])
def test_legacy_np_random_draws_what_the_plain_calls_draw(num_warmups, rows):
    state = np.random.get_state()
    try:
        np.random.seed(7)
        plain = [noisy(rand(rows, seed=i)) for i in range(3)]
        after_plain = np.random.get_state()[1].copy()
        # Routing off: the legacy draws are refused (routed draws: tests/unit/test_routes_random_host.py).
        f = cg.jit(noisy, config=dict(HOST, num_warmups=num_warmups, route_library_calls=False))
        np.random.seed(7)
        graphed = [f(rand(rows, seed=i)) for i in range(3)]
        assert all(np.array_equal(g, p) for g, p in zip(graphed, plain))
        np.testing.assert_array_equal(np.random.get_state()[1], after_plain)  # nothing else drawn
    finally:
        np.random.set_state(state)
    assert f.stats().fallbacks_by_reason == {"library_call": 3}
    assert "np.random.standard_normal" in f.stats().detail("library_call")


def test_a_caught_legacy_draw_in_a_warm_up_still_fails_the_capture():
    def careful(x):
        try:
            return x + np.random.random(x.shape)
        except cg.CaptureError:
            return x

    state = np.random.get_state()
    try:
        np.random.seed(3)
        plain = [careful(rand(4)) for _ in range(2)]
        np.random.seed(3)
        f = cg.jit(careful, config=dict(HOST, route_library_calls=False))
        graphed = [f(rand(4)) for _ in range(2)]
    finally:
        np.random.set_state(state)
    assert all(np.array_equal(g, p) for g, p in zip(graphed, plain))
    assert f.stats().fallbacks_by_reason == {"library_call": 2}


# -- what the call that captures counts --------------------------------------------------------------------


def test_the_call_that_captures_is_a_miss_that_replays_nothing():
    f = cg.jit(lambda x: x + 1, config=HOST)
    x = rand(3)
    np.testing.assert_array_equal(f(x), x + 1)
    stats = f.stats()
    assert (stats.calls, stats.misses, stats.captures, stats.replays, stats.fallbacks) == (1, 1, 1, 0, 0)
    assert f.registry.get_hot_shapes() == [(cg.BatchDescriptor(4), 1)]
    f(x)
    assert (f.stats().hits, f.stats().replays) == (1, 1)
    assert f.registry.get_hot_shapes() == [(cg.BatchDescriptor(4), 2)]


@pytest.mark.parametrize("num_warmups", [0, 2])
def test_cupygraph_random_draws_what_plain_calls_draw(num_warmups):
    rng, twin = cg.random.default_rng(11, backend="host"), cg.random.default_rng(11, backend="host")

    def noisy_rows(x):
        return x + rng.standard_normal(x.shape)

    f = cg.jit(noisy_rows, config=dict(HOST, num_warmups=num_warmups))
    for rows in (4, 4, 8, 4):  # captures, a replay, another capture, a replay (capture sizes: a padded
        x = rand(rows)           # replay draws for its padding rows too)
        np.testing.assert_array_equal(f(x), x + twin.standard_normal(x.shape))
    assert f.stats().hits == 2 and f.stats().fallbacks == 0
