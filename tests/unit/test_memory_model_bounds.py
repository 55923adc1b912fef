"""``plan-sizes --memory-limit`` never prices a list below what capturing it takes (host backend).

A family's graphs share its pool: ``warmup`` captures the largest size first and the smaller graphs view its
blocks, so their measured costs are close to nothing. Those costs say what a size adds beside the largest
measured one, not what it needs as a list's largest. Each test measures a function, then captures the list
the model prices in a fresh family, as ``warmup`` would, and compares the price with what that family holds.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.diagnostics.memory_model import MeasuredCosts, MemoryModel, memory_model
from cupygraph.diagnostics.plan_sizes import plan_capture_sizes

COLS = 64  # float32 columns: a batched buffer of n rows is n * 256 bytes


def doubled(x):
    return x * 2


def rows(n):
    return np.random.default_rng(n).random((n, COLS)).astype(np.float32)


def warmed(sizes, order=None):
    """A host function that captured ``sizes``: by ``warmup`` (largest first), or by calls in ``order``."""
    f = cg.jit(doubled, config=dict(backend="host", capture_sizes=sorted(sizes)))
    if order is None:
        f.warmup(rows(1), progress=False)
    else:
        for n in order:
            f(rows(n))
    return f


def held_by_a_family_of(sizes):
    """What a fresh family holds once ``warmup`` captured ``sizes``."""
    return sum(cost.total_bytes for cost in warmed(sizes).stats().costs())


MEASURED = [1, 2, 4, 8, 12, 16, 20, 24, 28, 32]


@pytest.mark.parametrize("plan", [[16], [5, 16], [3, 12], [8, 24, 32], [48], [20, 64], [10, 128]])
@pytest.mark.parametrize("order", [None, MEASURED], ids=["largest_first", "smallest_first"])
def test_a_list_is_never_priced_below_what_its_family_holds(plan, order):
    model = memory_model([warmed(MEASURED, order)], None)
    assert model.cost(plan) >= held_by_a_family_of(plan)


def test_largest_first_measurements_price_a_smaller_largest_size_as_a_bound_and_say_so():
    f = warmed([4, 8, 16, 32])
    assert {c.size: c.total_bytes for c in f.stats().costs()} == {4: 0, 8: 0, 16: 0, 32: 32 * 256}
    traffic = {3: 5, 10: 3, 14: 2}
    # Before: the list [3, 10, 16] cost 0 bytes, so a limit of one byte took it.
    with pytest.raises(ValueError, match=r"does not hold the graph of the largest size 16 \(8,192 bytes, an upper "
                                         r"bound"):
        plan_capture_sizes(traffic, current=[4, 8, 16, 32], memory_limit=1, largest=16, measured=f)
    plan = plan_capture_sizes(traffic, current=[4, 8, 16, 32], memory_limit=8192, largest=16, measured=f)
    assert plan.sizes[-1] == 16
    assert "size 16 is below the largest measured (32)" in plan.memory


def test_a_larger_largest_size_costs_at_least_the_largest_measured_keys_bytes_per_row():
    costs = MeasuredCosts.fit({n: (8192 if n == 32 else 0) for n in MEASURED})
    assert costs.bytes_at(64) < 64 * 256  # the line through what the smaller keys added stays low
    assert MemoryModel((costs,)).cost([64]) == 64 * 256
    assert MemoryModel((costs,)).cost([32]) == 8192  # the largest measured: its own measurement


def test_measured_sizes_below_the_largest_keep_their_measured_cost_in_a_list_ending_at_it():
    costs = MeasuredCosts.fit({4: 1024, 8: 2048, 16: 4096})
    assert MemoryModel((costs,)).cost([4, 16]) == 1024 + 4096
    assert MemoryModel((costs,)).cost([6, 16]) == costs.bytes_at(6) + 4096
