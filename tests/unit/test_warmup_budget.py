"""``warmup(budget_s=)`` on the host backend (issue 32): under a budget the most used sizes first (by the
function's traffic, else largest first; without a budget, largest first), no capture started once the budget
is spent, the rest captured on their first call and replayed after, the progress bar showing what is left,
and the budget checked.

The budget is read on ``cupygraph.api.warmup.clock``; these tests replace it with a clock that ticks once
per reading, so what a budget captures never depends on how fast this machine is.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.api import warmup as warmup_module

SIZES = [4, 8, 16, 32]


def host(**fields):
    return dict(backend="host", capture_sizes=SIZES, **fields)


def rand(rows, cols=3):
    return np.random.default_rng(rows).random((rows, cols)).astype(np.float32)


def recorder():
    """A function that notes the rows of every run (the host backend runs it to capture), and the order of
    the sizes its captures ran for."""
    runs: list[int] = []

    def double(x):
        runs.append(x.shape[0])
        return x * 2

    def captured_order():
        return [n for i, n in enumerate(runs) if i == 0 or runs[i - 1] != n]

    return double, runs, captured_order


def with_traffic(fn, calls):
    """``fn`` jitted, called ``calls`` ({rows: calls}) times, then cleared: traffic and no graph."""
    f = cg.jit(fn, config=host())
    for rows, count in calls.items():
        for _ in range(count):
            f(rand(rows))
    f.clear()
    return f


@pytest.fixture
def ticking(monkeypatch):
    """The warm-up's clock, one second later at each reading (restored after the test)."""
    now = [0.0]

    def tick():
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(warmup_module, "clock", tick)
    return now


def test_under_a_budget_sizes_are_captured_most_used_first():
    fn, runs, captured_order = recorder()
    # 3 rows pad to 4 (5 calls), 10 and 12 to 16 (3 + 1 calls), 20 to 32 (2 calls); nothing pads to 8.
    f = with_traffic(fn, {3: 5, 10: 3, 12: 1, 20: 2})
    runs.clear()
    assert f.warmup(rand(1), progress=False, budget_s=math.inf) == 4
    assert captured_order() == [4, 16, 32, 8]


def test_without_a_budget_or_traffic_the_largest_size_goes_first_and_ties_go_larger_first():
    fn, runs, captured_order = recorder()
    f = with_traffic(fn, {3: 5, 10: 3})
    runs.clear()
    assert f.warmup(rand(1), progress=False) == 4  # every size is captured: largest first, for the pool
    assert captured_order() == [32, 16, 8, 4]
    fn, runs, captured_order = recorder()
    g = cg.jit(fn, config=host())
    assert g.warmup(rand(1), progress=False, budget_s=100) == 4  # no traffic yet
    assert captured_order() == [32, 16, 8, 4]
    fn, runs, captured_order = recorder()
    h = with_traffic(fn, {3: 2, 15: 2})  # 4 and 16 serve as many calls: 16 first
    runs.clear()
    h.warmup(rand(1), sizes=[4, 8, 16], progress=False, budget_s=100)
    assert captured_order() == [16, 4, 8]


def test_a_spent_budget_starts_no_capture_and_the_rest_capture_on_first_call(ticking):
    fn, runs, captured_order = recorder()
    f = with_traffic(fn, {3: 5, 10: 3, 20: 2})
    runs.clear()
    # Readings: 1 at the start, then 2 and 3 before the first two captures (1 and 2 s spent, under 2.5),
    # 4 before the third (3 s spent): stop. The two most used sizes were captured.
    assert f.warmup(rand(1), progress=False, budget_s=2.5) == 2
    assert captured_order() == [4, 16]
    assert sorted(e.key.descriptor.num_tokens for e in f.registry.entries()) == [4, 16]
    before = f.stats()
    x = rand(32)
    np.testing.assert_array_equal(f(x), x * 2)  # a deferred size: captured by its first call ...
    np.testing.assert_array_equal(f(x), x * 2)  # ... and replayed by the next
    after = f.stats()
    assert after.captures == before.captures + 1 and after.hits == before.hits + 1
    assert after.capture_failures == 0 and after.fallbacks_by_reason == {}
    assert sorted(e.key.descriptor.num_tokens for e in f.registry.entries()) == [4, 16, 32]


def test_a_budget_of_zero_captures_nothing_and_every_size_captures_on_first_call():
    fn, runs, _ = recorder()
    f = cg.jit(fn, config=host())
    assert f.warmup(rand(1), progress=False, budget_s=0) == 0  # 0 s: no capture may start
    assert runs == [] and f.registry.num_graphs() == 0 and f.stats().captures == 0
    for rows in (3, 8):
        x = rand(rows)
        np.testing.assert_array_equal(f(x), x * 2)
        np.testing.assert_array_equal(f(x), x * 2)
    stats = f.stats()
    assert stats.captures == 2 and stats.hits == 2 and stats.capture_failures == 0 and stats.fallbacks == 0


def test_an_infinite_budget_captures_every_size():
    f = cg.jit(lambda x: x + 1, config=host())
    assert f.warmup(rand(1), progress=False, budget_s=math.inf) == len(SIZES)


@pytest.mark.parametrize(("budget", "error", "message"), [
    (-0.5, ValueError, r"budget_s must be 0 or more seconds \(None: no budget\), got -0.5"),
    (math.nan, ValueError, "budget_s must be 0 or more seconds.*got nan"),
    ("1", TypeError, "budget_s must be a number of seconds.*got str '1'"),
    (True, TypeError, "budget_s must be a number of seconds.*got bool True"),
    ([1], TypeError, r"budget_s must be a number of seconds.*got list \[1\]"),
])
def test_the_budget_is_checked_before_anything_is_captured(budget, error, message):
    f = cg.jit(lambda x: x + 1, config=host())
    with pytest.raises(error, match=message):
        f.warmup(rand(1), progress=False, budget_s=budget)
    assert f.registry.num_graphs() == 0 and f.stats().captures == 0


class FakeBar:
    def __init__(self, total):
        self.total, self.postfixes, self.updates, self.closed = total, [], 0, False

    def set_postfix_str(self, text):
        self.postfixes.append(text)

    def update(self, n):
        self.updates += n

    def close(self):
        self.closed = True


def test_the_progress_bar_shows_what_is_left_and_what_was_deferred(ticking, monkeypatch):
    bars = []
    monkeypatch.setattr(warmup_module, "progress_bar",
                        lambda total, desc, enabled: bars.append(FakeBar(total)) or bars[-1])
    f = with_traffic(lambda x: x * 2, {3: 5, 10: 3, 20: 2})
    f.warmup(rand(1), budget_s=2.5)
    (bar,) = bars
    assert bar.total == 4 and bar.updates == 2 and bar.closed
    assert bar.postfixes == [
        "0 captured; left: 4 sizes (4, 16, 32, 8)",
        "1 captured; left: 3 sizes (16, 32, 8)",
        "budget spent: 2 sizes (32, 8) deferred to first call",
    ]


def test_capture_time_is_recorded_per_key():
    f = cg.jit(lambda x: x * 2, config=host())
    f.warmup(rand(1), sizes=[8, 4], progress=False)
    costs = f.stats().costs()
    assert [(c.mode, c.size) for c in costs] == [("FULL", 4), ("FULL", 8)]
    assert all(c.capture_s > 0 for c in costs)
    held = {e.key.descriptor.num_tokens: e.capture_time for e in f.registry.entries()}
    assert {c.size: c.capture_s for c in costs} == held
    assert sum(held.values()) == pytest.approx(f.stats().capture_time_s)


def test_a_methods_warmup_takes_the_budget(ticking):
    class Model:
        @cg.jit(batch_argnums=1, config=host())
        def forward(self, x):
            return x * 2

    model = Model()
    assert model.forward.warmup(rand(1), progress=False, budget_s=1.5) == 1  # 1 s spent after the first
    assert [e.key.descriptor.num_tokens for e in Model.forward.registry.entries()] == [32]
    with pytest.raises(ValueError, match="budget_s"):
        model.forward.warmup(rand(1), progress=False, budget_s=-1)



def test_a_deferred_size_waits_for_capture_after_as_without_warmup():
    f = cg.jit(lambda x: x * 2, config=host(capture_after=3))
    assert f.warmup(rand(1), progress=False, budget_s=0) == 0
    x = rand(5)
    for calls in (1, 2, 3):
        np.testing.assert_array_equal(f(x), x * 2)
        assert f.registry.num_graphs() == (1 if calls == 3 else 0)
    assert f.stats().capture_failures == 0
