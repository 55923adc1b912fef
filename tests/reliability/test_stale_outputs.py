"""Stale view outputs (``output_mode="view"``) detected in debug mode, on the host backend.

A view output is valid until the next call of the same function. With ``debug=True`` every
returned array is tracked with the write count of its graph family: ``cupygraph.check_fresh``
raises ``StaleOutputError`` for one read after a later replay or capture, and a debug-mode graphed
function refuses a stale view as an argument. What is not caught (derived views, non-debug mode)
is stated by a test too. The GPU variant is ``test_stale_outputs_gpu.py``.

The call that captures a key returns its own eager run's result, an array the caller owns (never
stale): each test calls once first, so the calls it checks replay.
"""

from __future__ import annotations

import numpy as np
import pytest
from reliability_helpers import check_stats

import cupygraph as cg

DEBUG_VIEW = dict(backend="host", capture_sizes=[2, 4, 8], output_mode="view", debug=True)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_a_view_read_after_the_next_replay_is_reported():
    f = cg.jit(lambda x: x * 2, config=DEBUG_VIEW)
    x1, x2 = rand(3, 2, seed=1), rand(3, 2, seed=2)
    captured = f(x1)
    y1 = f(x1)
    cg.check_fresh(captured, y1)  # fresh: nothing replayed since
    assert np.array_equal(y1, x1 * 2)
    y2 = f(x2)
    with pytest.raises(cg.StaleOutputError, match=r"the output of <lambda>\(\) is a view .* rewritten 1 time"):
        cg.check_fresh(y1)
    cg.check_fresh(y2, captured)  # the capturing call's result is the caller's own
    assert np.array_equal(y1, x2 * 2)  # what the error protects against: y1 shows the second call


def test_each_output_of_a_structure_is_tracked_and_named():
    f = cg.jit(lambda x: {"a": x + 1, "b": (x * 3, x.sum(axis=1))}, config=DEBUG_VIEW)
    f(rand(4, 3))
    out = f(rand(4, 3))
    f(rand(4, 3, seed=1))
    for leaf, index in ((out["a"], 0), (out["b"][0], 1), (out["b"][1], 2)):
        with pytest.raises(cg.StaleOutputError, match=rf"output {index} of <lambda>\(\)"):
            cg.check_fresh(leaf)


def test_a_replay_of_another_size_or_a_capture_makes_views_stale():
    f = cg.jit(lambda x: x - 1, config=DEBUG_VIEW)
    f(rand(3, 2))  # captures the graph for 4 rows
    y = f(rand(3, 2))
    f(rand(7, 2))  # another graph of the family (8 rows): captured (its warm-up writes the family's buffers)
    with pytest.raises(cg.StaleOutputError, match="rewritten 1 time"):
        cg.check_fresh(y)
    y = f(rand(3, 2))
    f.warmup(rand(1, 2), sizes=[2], progress=False)  # a capture alone
    with pytest.raises(cg.StaleOutputError):
        cg.check_fresh(y)


def test_same_size_calls_return_distinct_view_objects():
    # At the padded size the output is the whole static buffer; debug mode still returns a new
    # view object per call, so the first call's result can be told from the second's.
    f = cg.jit(lambda x: x + 1, config=DEBUG_VIEW)
    f(rand(4, 2))
    a = f(rand(4, 2))
    b = f(rand(4, 2, seed=1))
    assert a is not b and np.shares_memory(a, b)
    with pytest.raises(cg.StaleOutputError):
        cg.check_fresh(a)
    cg.check_fresh(b)


def test_a_stale_view_passed_back_in_is_refused_naming_the_argument():
    f = cg.jit(lambda x, y: x + y, config=DEBUG_VIEW, batch_argnums=(0, 1))
    x = rand(3, 2)
    f(x, x)
    y1 = f(x, x)
    f(x, x)
    with pytest.raises(cg.StaleOutputError, match=r"argument 1 of <lambda>\(\): the output of <lambda>"):
        f(x, y1)
    # A fresh view may be passed back: it is read (copied in) before the graph rewrites it.
    y2 = f(x, x)
    assert np.array_equal(f(y2, x), 3 * x)
    check_stats(f, 5)  # the refused call never ran


def test_eager_fallbacks_leave_views_fresh_and_clear_makes_them_stale():
    f = cg.jit(lambda x: x * 5, config=DEBUG_VIEW)
    f(rand(3, 2))
    y = f(rand(3, 2))
    big = f(rand(20, 2))  # above the largest capture size: runs eagerly, static buffers untouched
    cg.check_fresh(y, big)
    f.clear()  # the graph (and its buffers) are gone
    with pytest.raises(cg.StaleOutputError):
        cg.check_fresh(y)


def test_eviction_makes_views_of_the_evicted_graph_stale():
    f = cg.jit(lambda x: x * 5, config=dict(DEBUG_VIEW, max_cached_graphs=1))
    f(rand(2, 2))
    y = f(rand(2, 2))
    f(rand(7, 2))  # captures 8 rows and evicts the 2-row graph
    with pytest.raises(cg.StaleOutputError):
        cg.check_fresh(y)


def test_copy_mode_and_non_debug_outputs_are_never_reported():
    copy = cg.jit(lambda x: x * 2, config=dict(DEBUG_VIEW, output_mode="copy"))
    a = copy(rand(3, 2))
    copy(rand(3, 2, seed=1))
    cg.check_fresh(a)  # owned by the caller
    fast = cg.jit(lambda x: x * 2, config=dict(DEBUG_VIEW, debug=False))
    v = fast(rand(3, 2))
    fast(rand(3, 2, seed=1))
    cg.check_fresh(v)  # not tracked without debug: the documented limit
    cg.check_fresh(np.ones(3), 5, None)  # anything else passes


def test_not_caught_views_derived_from_a_returned_view():
    """The documented limit: a slice of a returned view is a new array nobody registered."""
    f = cg.jit(lambda x: x * 2, config=DEBUG_VIEW)
    f(rand(3, 2))
    y = f(rand(3, 2))
    part = y[1:]
    f(rand(3, 2, seed=1))
    cg.check_fresh(part)  # passes although stale
    with pytest.raises(cg.StaleOutputError):
        cg.check_fresh(y)


def test_tracking_does_not_keep_views_alive_or_grow():
    import gc

    from cupygraph.cache.checks import freshness

    f = cg.jit(lambda x: x * 2, config=DEBUG_VIEW)
    x = rand(3, 2)
    f(x)
    gc.collect()
    before = len(freshness._issued)
    for _ in range(200):
        f(x)
    gc.collect()
    assert len(freshness._issued) <= before + 1


def test_debug_mode_results_and_stats_match_non_debug():
    fn = lambda x: np.cumsum(x, axis=0) * 3
    on = cg.jit(fn, config=DEBUG_VIEW)
    off = cg.jit(fn, config=dict(DEBUG_VIEW, debug=False))
    for i, n in enumerate([3, 3, 8, 1, 5, 3]):
        x = rand(n, 4, seed=i)
        a, b = on(x), off(x)
        assert np.array_equal(a, fn(x)) and np.array_equal(b, fn(x))
        cg.check_fresh(a)
    assert untimed(on.stats().to_dict()) == untimed(off.stats().to_dict())


def untimed(stats):
    """Statistics without the capture times, which two runs of the same captures never share."""
    costs = [{**cost, "capture_s": 0} for cost in stats["graph_costs"]]
    return stats | {"capture_time_s": 0, "graph_costs": costs}
