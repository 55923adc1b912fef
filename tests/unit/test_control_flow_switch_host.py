"""cupygraph.switch without a GPU: the host semantics every mode agrees with, and the recording of one
SWITCH node against the simulated runtime (tests/control_flow_sim.py). The GPU tests are in
tests/gpu/test_control_flow_switch.py.

Out of range (negative, or at least the number of branches) runs no branch, eagerly, on the host
backend and in the graph alike.
"""

from __future__ import annotations

import numpy as np
import pytest
from control_flow_sim import Graph, Sim, assert_chain

import cupygraph as cg
from cupygraph.backends.graph_bodies import collecting_bodies
from cupygraph.control_flow import loops as cf
from cupygraph.control_flow import nodes
from cupygraph.errors import CaptureError
from cupygraph.reasons import FallbackReason, reason_of_capture_failure

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def recorder(count: int) -> tuple[list[int], list]:
    ran: list[int] = []
    return ran, [lambda i=i: ran.append(i) for i in range(count)]


# -- host semantics --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_the_index_selects_one_branch_for_every_integer_dtype(dtype, shape):
    for i in range(3):
        ran, branches = recorder(3)
        assert cg.switch(np.full(shape, i, dtype=dtype), branches) is None
        assert ran == [i]


@pytest.mark.parametrize("index", [1, np.int64(1), np.uint8(1)])
def test_an_integer_selects_the_branch_outside_a_capture(index):
    ran, branches = recorder(3)
    cg.switch(index, branches)
    assert ran == [1]


@pytest.mark.parametrize("index", [
    np.array(-1, np.int64), np.array([-128], np.int8), np.array(np.iinfo(np.int64).min), np.array(3, np.int32),
    np.array(2**32 + 1, np.int64),  # truncated to 32 bits it would select branch 1
    np.array(2**32, np.uint64), np.array(2**64 - 1, np.uint64), np.array(2**32 - 1, np.uint32), -1, 3, 10**30,
])
def test_an_index_out_of_range_runs_no_branch(index):
    ran, branches = recorder(3)
    cg.switch(index, branches)
    assert ran == []


def test_the_index_is_read_once_so_a_branch_writing_it_runs_no_other():
    index = np.array([0], np.int32)
    ran: list[int] = []

    def first():
        index[0] = 1
        ran.append(0)

    cg.switch(index, [first, lambda: ran.append(1)])
    assert ran == [0] and int(index[0]) == 1


@pytest.mark.parametrize("index, branches, error, message", [
    (np.array(0), [lambda: None, 3], TypeError, r"callable branches: branches\[1\] is int"),
    (np.array(0), [], ValueError, "at least one branch: branches is empty"),
    (np.array(0), lambda: None, TypeError, "branches as a list or tuple of callables, got function"),
    (np.array(0), "ab", TypeError, "branches as a list or tuple of callables, got str"),
    (np.array(0.0), [lambda: None], TypeError, r"switch's index must be a one-element integer array, got float64"),
    (np.array([True]), [lambda: None], TypeError, r"switch's index must be a one-element integer array, got bool"),
    (np.array(0, np.complex64), [lambda: None], TypeError, "switch's index must be a one-element integer array"),
    (True, [lambda: None], TypeError, "switch's index must be an integer, got bool"),
    (1.0, [lambda: None], TypeError, "switch's index must be a one-element integer array, got builtins.float"),
    ("1", [lambda: None], TypeError, "switch's index must be a one-element integer array, got builtins.str"),
    (np.array([0, 1]), [lambda: None], ValueError, r"switch's index must hold exactly one element, got int64\[2\]"),
    (np.zeros((0,), np.int32), [lambda: None], ValueError, "exactly one element"),
])
def test_bad_arguments_are_named(index, branches, error, message):
    with pytest.raises(error, match=message):
        cg.switch(index, branches)


def test_branches_run_inside_a_conditional_as_collectives_see_it():
    seen = []
    cg.switch(np.array(0), [lambda: seen.append(cf.inside_conditional())])
    assert seen == [True] and not cf.inside_conditional()


def route(index, x):
    """Three ways to transform x, chosen by a one-element index; out of range leaves the poison."""
    out = np.full_like(x, -7.0)

    def double():
        np.multiply(x, 2.0, out=out)

    def shift():
        np.add(x, 100.0, out=out)

    def square():
        np.multiply(x, x, out=out)

    cg.switch(index, [double, shift, square])
    return out


def test_jit_on_the_host_backend_replays_every_index_as_plain_python():
    graphed = cg.jit(route, config=dict(backend="host", capture_sizes=[8]), batch_argnums=(1,))
    rng = np.random.default_rng(7)
    for value in (0, 1, 2, -1, 3, 2**40, 1, 0):
        index = np.array([value], np.int64)
        x = rng.standard_normal((8, 4))
        np.testing.assert_array_equal(graphed(index, x), route(index, x))
    stats = graphed.stats()
    assert stats.captures == 1 and stats.fallbacks == 0 and stats.hits >= 7


def test_mode_none_gives_the_same():
    eager = cg.jit(route, config=dict(backend="host", mode="NONE"), batch_argnums=(1,))
    x = np.arange(8.0).reshape(4, 2)
    for value in (2, -3):
        index = np.array([value], np.uint8 if value >= 0 else np.int8)
        np.testing.assert_array_equal(eager(index, x), route(index, x))


def machine(n):
    """A small state machine: a switch inside a while loop, the state chosen by the data."""
    state = np.zeros(1, np.int32)
    steps = np.zeros(1, np.int32)
    trace = np.zeros(1, np.int64)

    def body():
        cg.switch(state, [lambda: np.add(state, 2, out=state),  # 0 -> 2
                          lambda: np.subtract(state, 1, out=state),  # 1 -> 0
                          lambda: np.subtract(state, 1, out=state)])  # 2 -> 1
        trace[...] = trace * 3 + state
        steps[...] += 1

    iters = cg.while_loop(lambda: steps < n, body)
    return iters, trace


def test_a_switch_inside_a_while_loop_on_the_host_backend():
    graphed = cg.jit(machine, config=dict(backend="host"))
    for value in (5, 0, 9, 1):
        n = np.array([value], np.int32)
        got, want = graphed(n), machine(n)
        assert int(got[0]) == int(want[0]) == value
        np.testing.assert_array_equal(got[1], want[1])
    assert graphed.stats().captures == 1


def test_a_host_capture_refuses_what_the_gpu_would():
    """A Python int index would be frozen into a graph, and a graph break cannot run in a body: the GPU
    refuses both under capture, so the host reference does too (the call runs eagerly, reason counted)."""
    def host_index(x):
        y = x * 2
        cg.switch(1, [lambda: None, lambda: y.__iadd__(1)])
        return y

    f = cg.jit(host_index, config=dict(backend="host", capture_sizes=[4]))
    x = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(f(x), x * 2 + 1)
    assert f.registry.num_graphs() == 0 and sum(f.stats().fallbacks_by_reason.values()) == 1

    twice = cg.graph_break(lambda v: v * 2)

    def break_in_branch(x):
        out = x.copy()
        cg.switch(np.zeros(1, np.int32), [lambda: out.__setitem__(slice(None), twice(out))])
        return out

    g = cg.jit(break_in_branch, config=dict(backend="host", capture_sizes=[4], mode="PIECEWISE"))
    np.testing.assert_array_equal(g(x), x * 2)
    assert g.registry.num_graphs() == 0 and sum(g.stats().fallbacks_by_reason.values()) == 1


def test_the_reason_is_given_where_switch_nodes_are_missing():
    if not cg.gpu_available():
        reason = cf.switch_nodes_unavailable_reason()
        assert isinstance(reason, str) and reason


# -- recording against the simulated runtime ---------------------------------------------------------


def branches_on(sim, ran):
    return [lambda i=i: sim.op(f"b{i}", lambda: ran.append(i)) for i in range(3)]


@pytest.mark.parametrize("dtype", [np.int64, np.uint16])
def test_sim_switch_records_one_node_with_a_body_per_branch(monkeypatch, dtype):
    sim = Sim(monkeypatch)
    selector = np.zeros(1, np.int64)
    ran: list[int] = []

    def fn():
        cg.switch(sim.flag(lambda: selector[0], dtype), branches_on(sim, ran))
        sim.op("after", lambda: ran.append(99))

    with collecting_bodies() as noted:
        graph = sim.capture(fn)
    assert [n.name if n.kind == "kernel" else n.cond_type.name for n in graph.nodes] == [
        "flag", "cg_set_switch", "cudaGraphCondTypeSwitch", "after"]
    switch_node = graph.nodes[2]
    assert [[n.name for n in body.nodes] for body in switch_node.bodies] == [["b0"], ["b1"], ["b2"]]
    assert_chain(graph, [])
    assert sim.rt.calls.count("cudaStreamBeginCaptureToGraph") == 4  # three bodies, then the resume
    assert sim.rt.calls.count("cudaStreamEndCapture") == 5  # the pause, each body, then the capture's own end
    # Each body noted with its node and the user's line (this file's line that called cg.switch).
    assert [(b.graph, b.node, b.kind) for b in noted] == [(body, switch_node, "switch") for body in switch_node.bodies]
    assert [b.origin.split(" (at ")[0] for b in noted] == [f"branch {i} of the switch" for i in range(3)]
    assert all("test_control_flow_switch_host.py" in b.origin and "cg.switch(sim.flag(" in b.origin for b in noted)

    values = [2, 0, 1, 3, 1] if dtype == np.uint16 else [2, 0, -1, 1, 3, 2**32 + 1, 1]
    for value in values:
        ran.clear()
        selector[0] = value
        sim.rt.execute(graph)
        assert ran == ([value] if 0 <= value < 3 else []) + [99]


def test_sim_switch_in_a_while_loop_matches_the_host(monkeypatch):
    sim = Sim(monkeypatch)
    state, steps, trace = np.zeros(1, np.int64), np.zeros(1, np.int64), []

    def fn():
        def body():
            cg.switch(sim.flag(lambda: state[0]), [
                lambda: sim.op("to2", lambda: state.__setitem__(0, 2)),
                lambda: sim.op("to0", lambda: state.__setitem__(0, 0)),
                lambda: sim.op("to1", lambda: state.__setitem__(0, 1))])
            sim.op("step", lambda: (trace.append(int(state[0])), steps.__iadd__(1)))

        cg.while_loop(lambda: sim.flag(lambda: steps[0] < 7), body)

    with collecting_bodies() as noted:
        graph = sim.capture(fn)
    assert_chain(graph, [])
    assert [b.kind for b in noted] == ["while", "switch", "switch", "switch"]
    assert "cg.switch(sim.flag(lambda: state[0])" in noted[1].origin  # the line inside the loop body
    sim.rt.execute(graph)
    assert trace == [2, 1, 0, 2, 1, 0, 2]


def test_sim_switch_needs_cuda_12_8(monkeypatch):
    old = Sim(monkeypatch, driver_version=12040)
    old.rt.captures[old.s] = [Graph("top"), [], False]
    with pytest.raises(CaptureError, match=r"switch cannot be recorded.*driver is 12\.4; SWITCH conditional "
                                           r"nodes need CUDA 12\.8"):
        cg.switch(old.flag(lambda: 0), [lambda: None])
    assert old.rt.calls.count("cudaGraphAddNode") == 0


def test_the_reason_names_old_bindings_and_missing_runtimes(monkeypatch):
    sim = Sim(monkeypatch)
    cuda = nodes.conditional_runtime()[0]
    monkeypatch.setattr(cf, "conditional_runtime", lambda: (cuda, None))
    assert cf.switch_nodes_unavailable_reason() is None
    cuda.runtime_version = 12060
    assert cf.switch_nodes_unavailable_reason() == (
        "the CUDA runtime is 12.6; SWITCH conditional nodes need CUDA 12.8 or newer")
    sim.rt.cudaGraphConditionalNodeType = type("T", (), {"cudaGraphCondTypeIf": 0})
    assert "lack cudaGraphCondTypeSwitch" in cf.switch_nodes_unavailable_reason()
    monkeypatch.setattr(cf, "conditional_runtime", lambda: (None, "no CUDA driver found"))
    assert cf.switch_nodes_unavailable_reason() == "no CUDA driver found"


def test_sim_error_in_a_branch_resumes_the_enclosing_capture_then_raises(monkeypatch):
    sim = Sim(monkeypatch)
    top = Graph("top")
    sim.rt.captures[sim.s] = [top, [], False]

    def broken():
        raise KeyError("user bug")

    with pytest.raises(KeyError, match="user bug"):
        cg.switch(sim.flag(lambda: 0), [lambda: sim.op("b0", lambda: None), broken, lambda: sim.op("b2", None)])
    assert sim.rt.captures[sim.s][0] is top and sim.rt.captures[sim.s][1] == [top.nodes[-1]]
    assert [n.name for n in top.nodes[-1].bodies[0].nodes] == ["b0"] and top.nodes[-1].bodies[2].nodes == []


def test_sim_a_host_index_under_capture_is_a_capture_error(monkeypatch):
    sim = Sim(monkeypatch)
    sim.rt.captures[sim.s] = [Graph("top"), [], False]
    for index in (1, np.array([1], np.int32)):
        with pytest.raises(CaptureError, match=r"switch's index gave .* computed on the device") as err:
            cg.switch(index, [lambda: None, lambda: None])
        assert reason_of_capture_failure(str(err.value)) is FallbackReason.CAPTURE_FAILED
