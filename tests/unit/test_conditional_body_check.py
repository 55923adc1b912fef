"""The pre-flight check of conditional bodies (``driver/reading.ConditionalBodyCheck``) over a fake driver.

CUDA lets a conditional body (a while_loop/cond/switch body, its child graphs and nested bodies) hold
only kernel, empty, child graph, memset, memcpy and conditional nodes, and refuses any other at
instantiation with a bare status. The capture reads each recorded body before instantiating and
refuses such a body with the user's line, the node in words and the kernel recorded before it. The
GPU tests (tests/gpu/test_control_flow_switch.py) check the accepted kinds and the wiring on a
real driver.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from extras import need

driver = need("cuda.bindings.driver", "cuda", what="the conditional body check tests")

from fake_cuda_driver import FakeDriver  # noqa: E402

from cupygraph.backends.driver.reading import ConditionalBodyCheck, RecordingGraphs  # noqa: E402
from cupygraph.backends.driver.topology import (  # noqa: E402
    conditional_nodes,
    recording_topology,
    with_conditional_legend,
)
from cupygraph.backends.graph_bodies import NotedBody  # noqa: E402
from cupygraph.errors import CaptureError  # noqa: E402
from cupygraph.reasons import FallbackReason, reason_of_capture_failure  # noqa: E402

OK, BAD = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE
T = driver.CUgraphNodeType
SWITCH = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH
LOOP_LINE = "body of the while_loop (at model.py:12: cg.while_loop(cond, body))"


def kernel(func):
    return (T.CU_GRAPH_NODE_TYPE_KERNEL, SimpleNamespace(func=func, kern=0))


def check(graphs, nodes, noted, describes_conditionals=False):
    drv = FakeDriver(graphs, nodes, names={7: "step", 8: "reduce"}, describes_conditionals=describes_conditionals)
    return ConditionalBodyCheck(noted, drv), drv


REFUSED = [
    (T.CU_GRAPH_NODE_TYPE_HOST, "a host node (a host callback: Stream.launch_host_func"),
    (T.CU_GRAPH_NODE_TYPE_WAIT_EVENT, "an event-wait node (a wait on an external event, as NCCL records)"),
    (T.CU_GRAPH_NODE_TYPE_EVENT_RECORD, "an event-record node (an external event recorded, as NCCL does)"),
    (T.CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL, "an external-semaphore signal node"),
    (T.CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT, "an external-semaphore wait node"),
    (T.CU_GRAPH_NODE_TYPE_MEM_ALLOC, "a memory-allocation node (a stream-ordered allocation: cudaMallocAsync"),
    (T.CU_GRAPH_NODE_TYPE_MEM_FREE, "a memory-free node (a stream-ordered free: cudaFreeAsync"),
    (T.CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, "a batch memory-operation node (cuStreamBatchMemOp"),
]


@pytest.mark.parametrize("kind, words", REFUSED, ids=[k.name for k, _ in REFUSED])
def test_each_refused_node_kind_is_refused_with_the_users_line_and_the_node_in_words(kind, words):
    nodes = {1: kernel(7), 2: (kind, None), 3: kernel(8)}
    body_check, _ = check({300: [1, 2, 3]}, nodes, [NotedBody(300, 50, "while", LOOP_LINE)])
    with pytest.raises(CaptureError) as err:
        body_check.before_instantiation()
    message = str(err.value)
    assert message.startswith(f"{FallbackReason.CONDITIONAL_BODY_NODE.text}: the {LOOP_LINE} holds {words}")
    assert "recorded after kernel `step`" in message  # the kernel before it: where in the body the op ran
    assert "kernel, empty, child graph, memset, memcpy and conditional nodes" in message
    assert "move the op that made it out of the body" in message
    assert "CUDA_ERROR" not in message and "cudaError" not in message  # words, not a driver status
    assert reason_of_capture_failure(message) is FallbackReason.CONDITIONAL_BODY_NODE


def test_a_refused_node_first_in_the_body_or_in_a_child_graph_is_found():
    nodes = {1: (T.CU_GRAPH_NODE_TYPE_HOST, None), 2: kernel(7), 3: (T.CU_GRAPH_NODE_TYPE_GRAPH, 400),
             4: (T.CU_GRAPH_NODE_TYPE_MEM_FREE, None)}
    first, _ = check({300: [1]}, nodes, [NotedBody(300, 50, "if", "true_fn of the cond (at m.py:3: cg.cond(p, t))")])
    with pytest.raises(CaptureError, match=r"the true_fn of the cond \(at m\.py:3: cg\.cond\(p, t\)\) holds a host "
                                           r"node .*, recorded before any kernel of it"):
        first.before_instantiation()
    nested, _ = check({300: [2, 3], 400: [4]}, nodes, [NotedBody(300, 50, "while", LOOP_LINE)])
    with pytest.raises(CaptureError, match=r"the body of the while_loop .* holds a memory-free node .*recorded "
                                           r"after kernel `step`"):
        nested.before_instantiation()


def test_a_refused_node_in_a_nested_body_names_the_inner_call():
    """A switch in a loop body: the branch holding the node is named with its own line, not the loop's."""
    nodes = {1: kernel(7), 2: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, None), 3: kernel(8),
             4: (T.CU_GRAPH_NODE_TYPE_EVENT_RECORD, None)}
    branch = "branch 1 of the switch (at model.py:14: cg.switch(state, steps))"
    noted = [NotedBody(300, 50, "while", LOOP_LINE),
             NotedBody(301, 2, "switch", branch.replace("branch 1", "branch 0")), NotedBody(302, 2, "switch", branch)]
    for describes in (False, True):  # whether or not the driver leads from the node into its bodies
        switch = SimpleNamespace(conditional=SimpleNamespace(type=SWITCH, phGraph_out=[301, 302], size=2))
        nodes[2] = (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, switch)
        body_check, _ = check({300: [1, 2], 301: [3], 302: [4]}, nodes, noted, describes_conditionals=describes)
        with pytest.raises(CaptureError) as err:
            body_check.before_instantiation()
        assert f"the {branch} holds an event-record node" in str(err.value)
        assert LOOP_LINE not in str(err.value)


def test_the_kinds_a_body_may_hold_pass_and_are_read_once():
    copy = SimpleNamespace(srcMemoryType=driver.CUmemorytype.CU_MEMORYTYPE_DEVICE, srcDevice=0x7F00_0000_0100,
                           dstMemoryType=driver.CUmemorytype.CU_MEMORYTYPE_DEVICE, dstDevice=0x7F00_0000_0200,
                           WidthInBytes=64, Height=1, Depth=1)
    nodes = {1: kernel(7), 2: (T.CU_GRAPH_NODE_TYPE_MEMSET, SimpleNamespace(dst=0x7F00_0000_0200, elementSize=4,
                                                                             width=16, height=1)),
             3: (T.CU_GRAPH_NODE_TYPE_MEMCPY, copy), 4: (T.CU_GRAPH_NODE_TYPE_EMPTY, None),
             5: (T.CU_GRAPH_NODE_TYPE_GRAPH, 400), 6: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, None), 7: kernel(8)}
    noted = [NotedBody(300, 50, "while", LOOP_LINE), NotedBody(301, 6, "if", "true_fn of the cond (at m.py:5)")]
    body_check, drv = check({300: [1, 2, 3, 4, 5, 6], 301: [7], 400: [7]}, nodes, noted)
    body_check.before_instantiation()
    assert sorted(body_check.read) == [300, 301, 400]
    assert sorted(drv.listed) == [300, 301, 400]
    body_check.before_instantiation()  # nothing new recorded since: nothing read again
    assert sorted(drv.listed) == [300, 301, 400]


def test_each_piece_checks_the_bodies_recorded_since_the_last():
    nodes = {1: kernel(7), 2: (T.CU_GRAPH_NODE_TYPE_HOST, None)}
    noted = [NotedBody(300, 50, "while", LOOP_LINE)]
    body_check, drv = check({300: [1], 301: [2]}, nodes, noted)
    body_check.before_instantiation()  # the first piece: fine
    noted.append(NotedBody(301, 51, "if", "false_fn of the cond (at m.py:9: cg.cond(p, t, f))"))
    with pytest.raises(CaptureError, match=r"the false_fn of the cond \(at m\.py:9"):
        body_check.before_instantiation()  # the second piece
    assert drv.listed == [300, 301]


def test_a_driver_that_cannot_be_read_never_fails_the_capture():
    class Broken:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

    ConditionalBodyCheck([NotedBody(300, 50, "while", LOOP_LINE)], Broken()).before_instantiation()
    ConditionalBodyCheck([], Broken()).before_instantiation()  # no bodies: nothing read at all


def test_the_recordings_reading_reuses_the_checked_bodies_and_describes_the_switch_from_the_notes():
    """Where the driver cannot describe a conditional node, its type and bodies come from what control flow
    noted: topology, inspect and dot then show ``switch, 3 branches`` on every driver."""
    nodes = {1: kernel(7), 2: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, None), 3: kernel(8), 4: kernel(8), 5: kernel(7)}
    noted = [NotedBody(300 + i, 2, "switch", f"branch {i} of the switch (at m.py:4)") for i in range(3)]
    graphs = {100: [1, 2], 300: [3], 301: [4, 5], 302: []}
    body_check, drv = check(graphs, nodes, noted)
    body_check.before_instantiation()
    read = RecordingGraphs([SimpleNamespace(graph=100)], noted, needed=True, drv=drv, known=body_check.read)
    assert drv.listed == [300, 301, 100]  # the bodies are not read twice (302 has no nodes to list)
    switch = read.tops[100].nodes[1]
    assert switch.conditional == "switch" and switch.problem is None
    assert [body.handle for body in switch.children] == [300, 301, 302]
    assert [body.handle for body in read.bodies] == [300, 301, 302]
    assert conditional_nodes(read.tops[100]) == ["switch, 3 branches"]
    recording = SimpleNamespace(steps=[SimpleNamespace(graph=100)], snapshot_of=read.top)
    topology = recording_topology(recording)
    assert topology["conditional"] == ["switch, 3 branches"]
    assert topology["kernels"] == ["step", "reduce", "reduce", "step"]  # the branches' kernels, in place


def test_the_dot_legend_lists_the_conditional_nodes():
    dot = 'digraph dot {\nsubgraph cluster_1 {\n"a" -> "b";\n}\n}\n'
    legend = with_conditional_legend(dot, ["while, 1 body", "switch, 3 branches"])
    assert legend.startswith(dot[:-3]) and legend.endswith("}\n")
    assert '"cupygraph_conditional_nodes" [shape="note" label="conditional nodes (cupygraph):\\lwhile, 1 body' \
           '\\lswitch, 3 branches\\l"];' in legend
    assert with_conditional_legend(dot, []) == dot


def test_inspect_lists_each_graphs_conditional_nodes(monkeypatch):
    """``describe`` (``cupygraph inspect``) names the conditional nodes of each graph the CuPy backend holds,
    as topology reads them; a host-backend function holds no CUDA graph and gets no such section."""
    import numpy as np

    import cupygraph as cg

    nodes = {1: kernel(7), 2: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, None), 3: kernel(8)}
    noted = [NotedBody(300 + i, 2, "switch", f"branch {i} of the switch (at m.py:4)") for i in range(2)]
    drv = FakeDriver({100: [1, 2], 300: [3], 301: []}, nodes, names={7: "step", 8: "reduce"},
                     describes_conditionals=False)
    read = RecordingGraphs([SimpleNamespace(graph=100)], noted, needed=True, drv=drv)

    f = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=[4]))
    f(np.ones((3, 2)))
    assert "conditional nodes" not in f.describe()
    (entry,) = f.registry.entries()
    monkeypatch.setattr(f.backend, "name", "cupy")
    monkeypatch.setattr(entry, "recording", SimpleNamespace(steps=[SimpleNamespace(graph=100)], snapshot_of=read.top))
    lines = f.describe().splitlines()
    at = lines.index("conditional nodes (while_loop, cond, switch) per graph:")
    assert lines[at + 1] == "  FULL size=4: switch, 2 branches"
