"""cupygraph.while_loop / cupygraph.cond without a GPU.

1. Host semantics (eager, NONE mode, host backend): the loop and branch run in Python.
2. The recording logic against a simulated CUDA runtime (tests/control_flow_sim.py): the order of
   calls and the graph control flow builds, not the real driver; the GPU tests in
   tests/gpu/test_control_flow.py do that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from control_flow_sim import Err, Graph, Sim, assert_chain
from repo_files import load_example

import cupygraph as cg
from cupygraph.control_flow import loops as cf
from cupygraph.control_flow import nodes
from cupygraph.errors import CaptureError

ROOT = Path(__file__).resolve().parents[2]


class Counter:
    """A NumPy loop state plus a record of how often cond_fn ran."""

    def __init__(self, start: int, stop: int):
        self.x = np.array([start], dtype=np.int32)
        self.stop = stop
        self.cond_calls = 0

    def cond(self) -> np.ndarray:
        self.cond_calls += 1
        return self.x < self.stop

    def body(self) -> None:
        self.x += 1


# -- host semantics --------------------------------------------------------------------------------


@pytest.mark.parametrize("start, stop, iterations", [(0, 0, 0), (5, 3, 0), (0, 1, 1), (0, 1000, 1000)])
def test_while_loop_runs_until_the_condition_is_false(start, stop, iterations):
    state = Counter(start, stop)
    count = cg.while_loop(state.cond, state.body)
    assert isinstance(count, np.ndarray) and count.dtype == np.int32 and count.shape == ()
    assert int(count) == iterations
    assert int(state.x[0]) == max(start, stop) if iterations else int(state.x[0]) == start
    assert state.cond_calls == iterations + 1  # once before the loop, once after every iteration


@pytest.mark.parametrize("max_iters, expected", [(0, 0), (1, 1), (7, 7), (50, 20)])
def test_max_iters_caps_the_loop_and_cond_runs_iterations_plus_one(max_iters, expected):
    state = Counter(0, 20)
    count = cg.while_loop(state.cond, state.body, max_iters=max_iters)
    assert int(count) == expected == int(state.x[0])
    assert state.cond_calls == expected + 1


def test_max_iters_stops_an_endless_loop():
    calls = []
    count = cg.while_loop(lambda: np.array(True), lambda: calls.append(1), max_iters=25)
    assert int(count) == 25 and len(calls) == 25


@pytest.mark.parametrize("flag", [np.array(1, np.int64), np.array([1], np.uint8), np.array(2.5),
                                  np.float32(np.nan), True, 3])
def test_any_one_element_truthy_value_is_accepted(flag):
    assert int(cg.while_loop(lambda: flag, lambda: None, max_iters=2)) == 2


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)])
def test_bad_max_iters_is_named(bad, error):
    with pytest.raises(error, match="max_iters"):
        cg.while_loop(lambda: np.array(False), lambda: None, max_iters=bad)


def test_condition_must_hold_one_element():
    with pytest.raises(ValueError, match=r"exactly one element.*int64\[3\]"):
        cg.while_loop(lambda: np.zeros(3, np.int64), lambda: None)
    with pytest.raises(TypeError, match="one-element array or a scalar"):
        cg.while_loop(lambda: "yes", lambda: None)
    with pytest.raises(TypeError, match="callable body_fn"):
        cg.while_loop(lambda: np.array(False), None)


def test_cond_runs_only_the_chosen_branch():
    ran = []
    assert cg.cond(np.array([1], np.int32), lambda: ran.append("t"), lambda: ran.append("f")) is None
    cg.cond(np.array(0.0), lambda: ran.append("t"), lambda: ran.append("f"))
    cg.cond(np.array(False), lambda: ran.append("t"))
    assert ran == ["t", "f"]


@pytest.mark.parametrize("pred", [np.array([1]), np.array([0])])
def test_cond_needs_a_true_fn_whichever_way_pred_points(pred):
    """Regression: ``cond(pred, None)`` ran nothing, silently; only false_fn may be left out."""
    with pytest.raises(TypeError, match="cond needs a callable true_fn, got NoneType"):
        cg.cond(pred, None, lambda: None)
    with pytest.raises(TypeError, match="cond needs a callable true_fn, got NoneType"):
        cg.cond(pred, None)


def test_cond_reads_pred_once_so_a_branch_writing_it_does_not_run_the_other():
    pred = np.array([1], np.int32)
    ran = []

    def true_fn():
        pred[0] = 0
        ran.append("t")

    cg.cond(pred, true_fn, lambda: ran.append("f"))
    assert ran == ["t"]


def test_nesting_cond_in_while_and_while_in_while():
    x = np.zeros(1, np.int64)
    evens = np.zeros(1, np.int64)
    i = np.zeros(1, np.int64)

    def body():
        cg.cond(x % 2 == 0, lambda: evens.__iadd__(1))
        x[0] += 1

    assert int(cg.while_loop(lambda: x < 9, body)) == 9
    assert int(evens[0]) == 5

    total = np.zeros(1, np.int64)

    def outer():
        j = np.zeros(1, np.int64)

        def inner():
            j[0] += 1
            total[0] += 1

        cg.while_loop(lambda: j < i, inner)
        i[0] += 1

    assert int(cg.while_loop(lambda: i < 5, outer)) == 5
    assert int(total[0]) == 0 + 1 + 2 + 3 + 4


def collatz_steps(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps of the Collatz map until 1, with the value after each step folded into a checksum."""
    x = n.astype(np.int64).copy()
    acc = np.zeros_like(x)

    def body():
        cg.cond(x[0] % 2 == 0, lambda: np.floor_divide(x, 2, out=x), lambda: np.add(3 * x, 1, out=x))
        acc[...] = acc * 3 + x

    steps = cg.while_loop(lambda: x[0] != 1, body, max_iters=10_000)
    return steps, acc


def test_jit_on_the_host_backend_gives_what_plain_python_gives():
    graphed = cg.jit(collatz_steps, config=dict(backend="host"))
    assert graphed.backend.name == "host"
    for start in (27, 6, 1, 97, 27):
        n = np.array([start], np.int64)
        steps, acc = graphed(n)
        want_steps, want_acc = collatz_steps(n)
        assert int(steps) == int(want_steps)
        np.testing.assert_array_equal(acc, want_acc)
    assert int(graphed(np.array([27], np.int64))[0]) == 111
    assert graphed.stats().captures == 1


def double_rows_n_times(x, n):
    """Writes into its copied argument ``x`` only when the loop runs (n > 0)."""
    i = np.zeros(1, np.int64)

    def body():
        x[...] = x * 2
        i[...] += 1

    cg.while_loop(lambda: i < n, body)
    return x + 0


@pytest.mark.xfail(strict=True, reason="known limit (RELIABILITY.md): writes into copied arguments are found by "
                   "comparing bytes at capture or on the first replay; a loop body that did not run then (0 "
                   "iterations) hides its write, and later padded calls leave the caller's array unwritten")
def test_a_loop_body_writing_a_padded_argument_writes_back_after_a_capture_where_it_did_not_run():
    graphed = cg.jit(double_rows_n_times, config=dict(backend="host", max_capture_size=16))
    rng = np.random.default_rng(0)
    for n in (0, 0, 3, 2):
        x = rng.standard_normal((13, 3))  # pads to 16: a copied argument
        plain = x.copy()
        np.testing.assert_array_equal(graphed(x, np.array([n])), double_rows_n_times(plain, np.array([n])))
        np.testing.assert_array_equal(x, plain)


def test_jit_in_mode_none_runs_the_host_loop():
    graphed = cg.jit(collatz_steps, config=dict(backend="host", mode="NONE"))
    assert int(graphed(np.array([6], np.int64))[0]) == 8


def test_cg_converges_on_numpy_and_matches_the_host_loop():
    example = load_example("cg_poisson")
    b = example.poisson_rhs(np, 48, seed=3)
    tol = 1e-8
    x, iters, rr = example.cg_solve(b, tol, 2000)
    x_ref, iters_ref, rr_ref = example.cg_host_loop(b, tol, 2000)
    assert 0 < int(iters) == iters_ref < 2000
    assert float(rr) < tol * tol and float(rr) == rr_ref
    np.testing.assert_array_equal(x, x_ref)
    assert example.residual_norm(b, x) < 2 * tol

    solver = example.make_solver(config=dict(backend="host"))
    for seed in (3, 4):
        b = example.poisson_rhs(np, 48, seed=seed)
        xj, itj, _rrj = solver(b, tol, 2000)
        x_ref, iters_ref, _ = example.cg_host_loop(b, tol, 2000)
        assert int(itj) == iters_ref
        np.testing.assert_array_equal(xj, x_ref)
    capped = example.cg_solve(b, tol, 5)
    assert int(capped[1]) == 5 and float(capped[2]) > tol * tol


def test_reason_is_given_where_conditional_nodes_are_missing():
    if not cg.gpu_available():
        reason = cf.conditional_nodes_unavailable_reason()
        assert isinstance(reason, str) and reason


# -- recording against a simulated runtime ---------------------------------------------------------


def test_sim_while_loop_records_one_graph_that_loops_on_the_device(monkeypatch):
    sim = Sim(monkeypatch)
    x = np.zeros(1, np.int64)
    stop = np.array([0], np.int64)
    after = []
    counts = []

    def fn():
        sim.op("reset", lambda: x.__setitem__(0, 0))
        count = cg.while_loop(lambda: sim.flag(lambda: x[0] < stop[0]), lambda: sim.op("inc", lambda: x.__iadd__(1)))
        counts.append(count)
        sim.op("after", lambda: after.append(int(x[0])))

    graph = sim.capture(fn)
    assert [n.name if n.kind == "kernel" else "WHILE" for n in graph.nodes] == [
        "reset", "flag", "cg_while_begin", "WHILE", "after"]
    assert [n.name for n in graph.nodes[3].body.nodes] == ["inc", "flag", "cg_while_step"]
    assert_chain(graph, [])
    for n in (0, 1, 1000, 3):  # new data between replays: the count follows on the device
        stop[0] = n
        sim.rt.execute(graph)
        assert int(counts[0].a) == n and after[-1] == n
    assert sim.rt.calls.count("cudaStreamBeginCaptureToGraph") == 2  # body, then resume


def test_sim_max_iters_is_counted_on_the_device(monkeypatch):
    sim = Sim(monkeypatch)
    ticks = []

    def fn():
        return cg.while_loop(lambda: sim.flag(lambda: True), lambda: sim.op("tick", lambda: ticks.append(1)),
                             max_iters=17)

    out = []
    graph = sim.capture(lambda: out.append(fn()))
    sim.rt.execute(graph)
    assert int(out[0].a) == 17 and len(ticks) == 17


def test_sim_cond_both_ways_and_nested_in_a_loop(monkeypatch):
    sim = Sim(monkeypatch, driver_version=12040)  # also pads empty bodies, as old drivers need
    pred = np.array([1])
    ran = []

    def fn():
        cg.cond(sim.flag(lambda: pred[0] != 0), lambda: sim.op("t", lambda: ran.append("t")),
                lambda: sim.op("f", lambda: ran.append("f")))
        cg.cond(sim.flag(lambda: pred[0] != 0), lambda: None)  # an empty branch

    graph = sim.capture(fn)
    assert_chain(graph, [])
    ifs = [n for n in graph.nodes if n.kind == "conditional"]
    assert len(ifs) == 3 and all(n.cond_type.name == "cudaGraphCondTypeIf" for n in ifs)
    assert [n.kind for n in ifs[2].body.nodes] == ["empty"]
    sim.rt.execute(graph)
    pred[0] = 0
    sim.rt.execute(graph)
    assert ran == ["t", "f"]

    sim2 = Sim(monkeypatch)
    x, evens, total = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)

    def nested():
        def body():
            cg.cond(sim2.flag(lambda: x[0] % 2 == 0), lambda: sim2.op("even", lambda: evens.__iadd__(1)))
            j = np.zeros(1, np.int64)
            sim2.op("j=0", lambda: j.__setitem__(0, 0))
            cg.while_loop(lambda: sim2.flag(lambda: j[0] < x[0]),
                          lambda: sim2.op("inner", lambda: (j.__iadd__(1), total.__iadd__(1))))
            sim2.op("x+1", lambda: x.__iadd__(1))

        cg.while_loop(lambda: sim2.flag(lambda: x[0] < 6), body)

    graph = sim2.capture(nested)
    assert_chain(graph, [])
    sim2.rt.execute(graph)
    assert int(x[0]) == 6 and int(evens[0]) == 3 and int(total[0]) == 0 + 1 + 2 + 3 + 4 + 5


def test_sim_failed_node_creation_leaves_the_capture_going(monkeypatch):
    sim = Sim(monkeypatch)
    sim.rt.fail["cudaGraphAddNode"] = Err.cudaErrorInvalidValue
    with pytest.raises(CaptureError, match="cudaGraphAddNode failed with cudaErrorInvalidValue"):
        sim.capture(lambda: cg.while_loop(lambda: sim.flag(lambda: False), lambda: None))
    assert sim.s in sim.rt.captures  # the caller's end_capture still finds the capture to end


def test_sim_error_in_the_body_resumes_the_enclosing_capture_then_raises(monkeypatch):
    sim = Sim(monkeypatch)

    def body():
        raise KeyError("user bug")

    top = Graph("top")
    sim.rt.captures[sim.s] = [top, [], False]
    with pytest.raises(KeyError, match="user bug"):
        cg.while_loop(lambda: sim.flag(lambda: True), body)
    assert sim.rt.captures[sim.s][0] is top and sim.rt.captures[sim.s][1] == [top.nodes[-1]]


def test_sim_invalidated_body_is_not_resumed(monkeypatch):
    sim = Sim(monkeypatch)

    def body():
        sim.rt.captures[sim.s][2] = True  # an op the capture could not take

    sim.rt.captures[sim.s] = [Graph("top"), [], False]
    with pytest.raises(CaptureError, match="invalidated"):
        cg.while_loop(lambda: sim.flag(lambda: True), body)
    assert sim.s not in sim.rt.captures  # left ended: finishing it would hit the driver bug


def test_sim_host_value_under_capture_is_a_capture_error(monkeypatch):
    sim = Sim(monkeypatch)
    sim.rt.captures[sim.s] = [Graph("top"), [], False]
    with pytest.raises(CaptureError, match="one-element array computed on the device"):
        cg.while_loop(lambda: True, lambda: None)
    with pytest.raises(CaptureError, match="pred"):
        cg.cond(np.array(True), lambda: None)


def test_unavailable_conditional_nodes_raise_capture_error(monkeypatch):
    sim = Sim(monkeypatch)
    monkeypatch.setattr(nodes, "conditional_runtime",
                        lambda: (None, "the CUDA driver is 12.2; conditional graph nodes need 12.4"))
    sim.rt.captures[sim.s] = [Graph("top"), [], False]
    with pytest.raises(CaptureError, match=r"while_loop cannot be recorded.*12\.4"):
        cg.while_loop(lambda: sim.flag(lambda: True), lambda: None)
    with pytest.raises(CaptureError, match="cond cannot be recorded"):
        cg.cond(sim.flag(lambda: True), lambda: None)


def test_a_host_capture_refuses_what_a_recorded_body_cannot_hold():
    # The GPU records a cond/while_loop into conditional nodes: a Python bool condition would be
    # frozen, and a graph break cannot run between pieces inside a body. The host refuses both too.
    def host_pred(x):
        y = x * 2
        cg.cond(True, lambda: y.__setitem__(slice(None), y + 1))
        return y

    f = cg.jit(host_pred, config=dict(backend="host", capture_sizes=[4]))
    x = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(f(x), x * 2 + 1)  # eagerly, with the reason counted
    assert f.registry.num_graphs() == 0 and sum(f.stats().fallbacks_by_reason.values()) == 1

    twice = cg.graph_break(lambda v: v * 2)

    def break_in_body(x):
        out = x.copy()
        cg.cond(np.ones(1), lambda: out.__setitem__(slice(None), twice(out)))
        return out

    g = cg.jit(break_in_body, config=dict(backend="host", capture_sizes=[4], mode="PIECEWISE"))
    np.testing.assert_array_equal(g(x), x * 2)
    assert g.registry.num_graphs() == 0 and sum(g.stats().fallbacks_by_reason.values()) == 1
