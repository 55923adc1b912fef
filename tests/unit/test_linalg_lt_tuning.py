"""Choosing a cuBLASLt algorithm by timing the heuristic's proposals (issue 31), on an emulated cuBLASLt.

The timer here charges each run what its algorithm's position in the heuristic's answer is given to
cost (``CostTimer``: no clock), so which proposal is kept is decided by the test, not by the machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from lt_emulator import CostTimer, FakeLt, c_library, lt_product, reference

import cupygraph as cg
from cupygraph.linalg import _lt_binding, _lt_plans, _lt_tuning


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    monkeypatch.setattr(_lt_plans, "_choices", {})
    monkeypatch.delenv(_lt_tuning.ENV, raising=False)


def operands(rows=4, beta_c=False):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 6)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    out = rng.standard_normal((rows, 5)).astype(np.float32) if beta_c else np.full((rows, 5), np.nan, np.float32)
    return x, w, b, out


def ran_positions(fake):
    return [fake.rank[call["algo"]] for call in fake.calls]


def test_the_fastest_proposal_is_kept_and_every_later_call_runs_it():
    fake = FakeLt(proposals=4)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    timer = CostTimer(fake, {0: 9e-6, 1: 4e-6, 2: 2e-6, 3: 7e-6})
    x, w, b, out = operands()
    assert lt_product(fake, plans, handle, x, w, out, b, "relu", timer=timer)[0]
    assert sorted(timer.timed) == [0, 0, 1, 1, 2, 2, 3, 3]  # a short proposal: one run, then a block
    assert ran_positions(fake)[-1] == 2  # the product itself ran the fastest
    close = np.testing.assert_allclose
    close(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)
    fake.calls.clear()
    lt_product(fake, plans, handle, x, w, out, b, "relu", timer=timer)
    lt_product(fake, plans, handle, x, w, out, b, "relu", capturing=True)  # a capture finds the same plan
    assert ran_positions(fake) == [2, 2] and fake.heuristic_calls == 1
    [plan] = cg.linalg.gemm_plans()
    assert (plan["proposals"], plan["chosen"]) == (4, 2)
    assert plan["microseconds"] == [9.0, 4.0, 2.0, 7.0]


def test_a_second_thread_keeps_the_processes_choice_without_timing_again():
    fake = FakeLt(proposals=3)
    first, second, handle = _lt_plans.PlanCache(fake), _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    lt_product(fake, first, handle, x, w, out, b, None, timer=CostTimer(fake, {0: 5e-6, 1: 1e-6, 2: 3e-6}))
    other = CostTimer(fake, {0: 1e-6, 1: 9e-6, 2: 9e-6})
    lt_product(fake, second, handle, x, w, out, b, None, timer=other)
    assert other.timed == [] and ran_positions(fake)[-1] == 1


def test_timing_writes_a_scratch_result_so_beta_c_reads_the_callers_values():
    fake = FakeLt(proposals=3)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands(rows=3, beta_c=True)
    c = out.copy()
    timer = CostTimer(fake, {0: 3e-6, 1: 2e-6, 2: 1e-6})
    lt_product(fake, plans, handle, x, w, out, b, None, alpha=0.5, beta=1.0, timer=timer)
    np.testing.assert_allclose(out, reference(x, w, b, None, alpha=0.5, beta=1.0, c=c), rtol=2e-5, atol=2e-5)
    [scratch] = timer.scratches
    assert scratch.nbytes >= out.nbytes and not np.all(scratch == 0x11)  # the trial runs wrote there


def test_a_proposal_that_cannot_run_is_skipped():
    fake = FakeLt(proposals=3, failing={0})
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    lt_product(fake, plans, handle, x, w, out, b, "gelu", timer=CostTimer(fake, {1: 4e-6, 2: 6e-6}))
    [plan] = cg.linalg.gemm_plans()
    assert plan["chosen"] == 1 and math.isinf(plan["microseconds"][0])
    np.testing.assert_allclose(out, reference(x, w, b, "gelu"), rtol=2e-5, atol=2e-5)


def test_a_long_candidate_is_timed_from_one_run():
    fake = FakeLt(proposals=2)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    timer = CostTimer(fake, {0: 5e-3, 1: 2e-3})
    matmuls = fake.matmuls
    lt_product(fake, plans, handle, x, w, out, b, None, timer=timer)
    # per proposal: one untimed run, one timed run; then the product itself
    assert fake.matmuls - matmuls == 2 * 2 + 1 and ran_positions(fake)[-1] == 1


def test_heuristic_mode_keeps_the_first_proposal_untimed(monkeypatch):
    monkeypatch.setenv(_lt_tuning.ENV, " Heuristic ")
    fake = FakeLt(proposals=4)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    timer = CostTimer(fake, {0: 9e-6, 1: 1e-6, 2: 1e-6, 3: 1e-6})
    lt_product(fake, plans, handle, x, w, out, b, "relu", timer=timer)
    assert timer.timed == [] and ran_positions(fake) == [0]
    [plan] = cg.linalg.gemm_plans()
    assert (plan["proposals"], plan["chosen"], plan["microseconds"]) == (1, 0, [])


def test_a_bad_tuning_mode_names_the_variable(monkeypatch):
    monkeypatch.setenv(_lt_tuning.ENV, "fastest")
    fake = FakeLt(proposals=2)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    with pytest.raises(ValueError, match=r"CUPYGRAPH_GEMM_TUNING='fastest' is not a GEMM tuning mode; valid: timed"):
        lt_product(fake, plans, handle, x, w, out, b, None, timer=CostTimer(fake, {}))
    assert len(plans) == 0 and cg.linalg.gemm_plans() == []  # nothing half-made; a fixed variable works
    monkeypatch.delenv(_lt_tuning.ENV)
    assert lt_product(fake, plans, handle, x, w, out, b, None, timer=CostTimer(fake, {0: 1e-6, 1: 2e-6}))[0]


def test_the_ctypes_binding_reads_every_proposal():
    fake = FakeLt(proposals=5)
    binding = _lt_binding.CUBLASLT.ctypes(c_library(fake), "(ctypes callbacks)")
    plans, handle = _lt_plans.PlanCache(binding), binding.create()
    x, w, b, out = operands(rows=1)
    timer = CostTimer(fake, {0: 5e-6, 1: 4e-6, 2: 3e-6, 3: 1e-6, 4: 2e-6})
    assert lt_product(binding, plans, handle, x, w, out, b, "relu", timer=timer)[0]
    assert sorted(set(timer.timed)) == [0, 1, 2, 3, 4] and ran_positions(fake)[-1] == 3
    np.testing.assert_allclose(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)
    plans.close()
    binding.destroy(handle)


def test_a_timer_that_fails_keeps_the_heuristics_first_and_says_so(caplog):
    fake = FakeLt(proposals=3)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()

    class Broken(CostTimer):
        def seconds(self, run, repeats):
            raise RuntimeError("stream capture unsupported here")

    with caplog.at_level("WARNING", logger="cupygraph"):
        assert lt_product(fake, plans, handle, x, w, out, b, "relu", timer=Broken(fake, {}))[0]
    assert "timing cuBLASLt's proposals for a 5x4x6 float32 GEMM" in caplog.text
    assert "RuntimeError: stream capture unsupported here" in caplog.text
    assert ran_positions(fake)[-1] == 0
    np.testing.assert_allclose(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)


def test_a_key_the_table_cannot_keep_runs_the_heuristics_first_in_every_plan(monkeypatch):
    # Beyond MAX_CHOICES a key's choice is made again by each new plan of it (another thread's, or after
    # its plan was dropped); timed each time, two plans could run two kernels (eager vs a replay).
    monkeypatch.setattr(_lt_plans, "MAX_CHOICES", 0)
    fake = FakeLt(proposals=3)
    first, second, handle = _lt_plans.PlanCache(fake), _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()
    timers = [CostTimer(fake, {0: 5e-6, 1: 1e-6, 2: 3e-6}), CostTimer(fake, {0: 9e-6, 1: 9e-6, 2: 1e-6})]
    for plans, timer in zip((first, second), timers):
        lt_product(fake, plans, handle, x, w, out, b, "relu", timer=timer)
    assert [timer.timed for timer in timers] == [[], []]
    assert ran_positions(fake) == [0, 0] and cg.linalg.gemm_plans() == []
    np.testing.assert_allclose(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)


def test_a_key_timed_while_the_table_filled_keeps_the_heuristics_first(monkeypatch):
    monkeypatch.setattr(_lt_plans, "MAX_CHOICES", 1)
    fake = FakeLt(proposals=3)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()

    class FillingTimer(CostTimer):  # another thread's key takes the last place while this one is timed
        def seconds(self, run, repeats):
            _lt_plans._choices.setdefault("another thread's key", None)
            return super().seconds(run, repeats)

    lt_product(fake, plans, handle, x, w, out, b, None, timer=FillingTimer(fake, {0: 5e-6, 1: 1e-6, 2: 3e-6}))
    assert ran_positions(fake)[-1] == 0  # the timed choice (1) was not kept, so it is not run either
    np.testing.assert_allclose(out, reference(x, w, b, None), rtol=2e-5, atol=2e-5)


def test_a_scratch_result_the_device_cannot_hold_costs_the_timing_not_the_product(caplog):
    fake = FakeLt(proposals=3)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    x, w, b, out = operands()

    class Full(CostTimer):
        def scratch(self, nbytes):
            raise MemoryError(f"out of memory allocating {nbytes} bytes")

    with caplog.at_level("WARNING", logger="cupygraph"):
        assert lt_product(fake, plans, handle, x, w, out, b, "relu", timer=Full(fake, {}))[0]
    assert "MemoryError: out of memory allocating" in caplog.text
    assert ran_positions(fake) == [0]
    np.testing.assert_allclose(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)


def test_the_timer_and_trial_are_made_only_when_a_plan_is(monkeypatch):
    """A product whose plan is made already builds no timer and no trial: an eager call pays for them once
    per key, not every call."""
    made = []

    class CountedTrial(_lt_plans.Trial):
        def __new__(cls, *args):
            made.append("trial")
            return super().__new__(cls, *args)

    monkeypatch.setattr(_lt_plans, "Trial", CountedTrial)
    fake = FakeLt(proposals=3)
    plans, handle = _lt_plans.PlanCache(fake), fake.create()
    timer = CostTimer(fake, {0: 3e-6, 1: 1e-6, 2: 2e-6})

    def make_timer():
        made.append("timer")
        return timer

    arrays = {rows: operands(rows) for rows in (4, 2)}  # the same arrays: the same alignments, so the same key
    for rows in (4, 4, 4, 2, 2, 4):
        x, w, b, out = arrays[rows]
        assert lt_product(fake, plans, handle, x, w, out, b, "relu", make_timer=make_timer)[0]
        np.testing.assert_allclose(out, reference(x, w, b, "relu"), rtol=2e-5, atol=2e-5)
    assert made == ["timer", "trial"] * 2  # one of each per key (4 rows, 2 rows)
    assert ran_positions(fake)[-1] == 1
