"""The PDL rewrite against a fake CUDA driver: what is converted, and what happens when the driver
refuses (issue 18). The real driver, the swap of CuPy's executable and the replays are covered by
tests/gpu/test_pdl.py; here the fallbacks a real GPU did not need are forced.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from extras import need

driver = need("cuda.bindings.driver", "cuda", what="the PDL rewrite tests")

from cupygraph.backends.driver.reading import RecordingGraphs  # noqa: E402
from cupygraph.backends.graph_bodies import NotedBody  # noqa: E402
from cupygraph.backends.pdl import rewrite as pdl  # noqa: E402
from cupygraph.backends.pdl.ptx_scan import WaitVerdict  # noqa: E402

OK, BAD = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE
KERNEL, MEMCPY = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL, driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY
WAITS = {"wait_a", "wait_b", "wait_c", "wait_d"}


class FakeDriver:
    """Graphs of integer nodes; a node's kernel name is its function. ``accepts(graph, edges)``
    decides whether an instantiation succeeds."""

    CUresult, CUgraphNodeType = driver.CUresult, driver.CUgraphNodeType
    CUfunction_attribute, CUgraphDependencyType = driver.CUfunction_attribute, driver.CUgraphDependencyType
    CUgraphEdgeData = driver.CUgraphEdgeData
    CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1

    def __init__(self, graphs, kinds, accepts=lambda graph, edges: True):
        self.edges = {g: [(s, d, 0) for s, d in e] for g, e in graphs.items()}
        self.kinds, self.accepts = kinds, accepts
        self.instantiated, self.destroyed = [], []

    def CUgraph(self, handle):
        return handle

    def cuGraphGetNodes(self, graph, count):
        nodes = sorted({n for s, d, _ in self.edges[graph] for n in (s, d)})
        return (OK, nodes[:count], len(nodes))

    def cuGraphGetEdges(self, graph, count):
        edges = self.edges[graph][:count]
        data = [SimpleNamespace(type=t, from_port=t, to_port=0) for _, _, t in edges]
        return (OK, [s for s, _, _ in edges], [d for _, d, _ in edges], data, len(self.edges[graph]))

    def cuGraphNodeGetType(self, node):
        return (OK, KERNEL if self.kinds[node] != "memcpy" else MEMCPY)

    def cuGraphKernelNodeGetParams(self, node):
        return (OK, SimpleNamespace(func=node))

    def cuFuncGetName(self, func):
        return (OK, self.kinds[func].encode())

    def cuFuncGetAttribute(self, attribute, func):
        return (OK, 90)

    def cuFuncGetModule(self, func):
        return (OK, 7)

    def cuGraphRemoveDependencies(self, graph, sources, targets, data, n):
        wanted = [(s, d, int(e.type)) for s, d, e in zip(sources, targets, data)]
        if any(w not in self.edges[graph] for w in wanted):
            return (BAD,)
        self.edges[graph] = [e for e in self.edges[graph] if e not in wanted]
        return (OK,)

    def cuGraphAddDependencies(self, graph, sources, targets, data, n):
        self.edges[graph] += [(s, d, int(e.type)) for s, d, e in zip(sources, targets, data)]
        return (OK,)

    def cuGraphInstantiate(self, graph, flags):
        if not all(self.accepts(g, e) for g, e in self.edges.items()):
            return (BAD, None)
        self.instantiated.append(graph)
        return (OK, 1000 + len(self.instantiated))

    def cuGraphExecDestroy(self, exec_):
        self.destroyed.append(exec_)
        return (OK,)


class Known:
    def verdict(self, name, arch):
        return WaitVerdict(True) if name in WAITS else WaitVerdict(False, "no griddepcontrol.wait")


@pytest.fixture
def fake(monkeypatch):
    def install(graphs, kinds, accepts=lambda graph, edges: True, capability=90):
        drv = FakeDriver(graphs, kinds, accepts)
        monkeypatch.setattr(pdl, "bindings", lambda: drv)
        monkeypatch.setattr("cupygraph.backends.driver.reading.bindings", lambda: drv)
        monkeypatch.setattr("cupygraph.backends.driver.snapshot.bindings", lambda: drv)
        monkeypatch.setattr(pdl, "_compute_capability", lambda device: capability)
        monkeypatch.setattr(pdl, "known_module", lambda handle, device: Known())

        return drv

    return install


def step(handle):
    return SimpleNamespace(graph=handle, graphExec=1)


REPLACED: dict = {}


def apply(steps, bodies, setting="auto"):
    """``apply_pdl`` on the capture's one reading of the graphs, as ``CupyBackend.capture`` calls it;
    the new executable of each rewritten piece lands in ``REPLACED``."""
    graphs = RecordingGraphs(steps, bodies, needed=True)
    summary, replaced = pdl.apply_pdl(steps, graphs.tops, graphs.bodies, setting, 0, "f")
    REPLACED.clear()
    REPLACED.update(replaced)
    return summary


# a -> b, a -> c, b -> d, c -> d; plus a copy node feeding a.
DIAMOND = {1: [(9, 10), (10, 11), (10, 12), (11, 13), (12, 13)]}
KINDS = {9: "memcpy", 10: "wait_a", 11: "wait_b", 12: "wait_c", 13: "wait_d", 20: "plain", 21: "wait_a"}


def programmatic(drv, graph):
    return sorted((s, d) for s, d, t in drv.edges[graph] if t == 1)


def test_every_kernel_edge_into_a_waiting_kernel_converts(fake):
    drv = fake(DIAMOND, KINDS)
    steps = [step(1)]
    summary = apply(steps, [])
    assert programmatic(drv, 1) == [(10, 11), (10, 12), (11, 13), (12, 13)]
    assert (9, 10, 0) in drv.edges[1]
    assert summary.converted == 4 and summary.kept == {"producer_not_kernel": 1}
    assert REPLACED == {0: 1001} and summary.off_reason == ""  # the recording launches it instead of CuPy's


def test_a_driver_refusing_several_programmatic_dependencies_gets_the_narrow_choice(fake):
    def one_programmatic_dependency(graph, edges):
        into = [d for _, d, t in edges if t == 1]
        return len(into) == len(set(into))

    drv = fake(DIAMOND, KINDS, one_programmatic_dependency)
    summary = apply([step(1)], [])
    assert programmatic(drv, 1) == [(10, 11), (10, 12)]
    assert summary.converted == 2
    assert summary.kept == {"producer_not_kernel": 1, "consumer_has_other_dependencies": 2}


def test_a_driver_refusing_every_choice_leaves_the_graph_as_captured(fake):
    drv = fake(DIAMOND, KINDS, lambda graph, edges: all(t == 0 for _, _, t in edges))
    before = sorted(drv.edges[1])
    steps = [step(1)]
    summary = apply(steps, [])
    assert sorted(drv.edges[1]) == before
    assert REPLACED == {}  # CuPy's executable stays
    assert summary.converted == 0 and "refused" in summary.off_reason
    assert summary.kept["driver_refused"] == 4


def test_bodies_the_driver_refuses_stay_plain_while_the_top_graph_converts(fake):
    graphs = {1: [(10, 11)], 2: [(20, 21), (21, 12)]}  # graph 2: a conditional body
    drv = fake(graphs, KINDS, lambda graph, edges: graph != 2 or all(t == 0 for _, _, t in edges))
    summary = apply([step(1)], [NotedBody(2, 99, "while", "body of the while_loop")])
    assert programmatic(drv, 1) == [(10, 11)]
    assert programmatic(drv, 2) == []
    assert summary.converted == 1
    assert summary.kept == {"driver_refused": 2}


def test_kernels_that_do_not_wait_are_named(fake):
    drv = fake({1: [(10, 20), (20, 21)]}, KINDS)
    summary = apply([step(1)], [])
    assert programmatic(drv, 1) == [(20, 21)]
    assert summary.not_converted == {"plain": "no griddepcontrol.wait"}


@pytest.mark.parametrize("setting, capability, reason", [("off", 90, "pdl='off'"), ("auto", 80, "sm_90")])
def test_off_or_before_sm90_nothing_is_touched(fake, setting, capability, reason):
    drv = fake(DIAMOND, KINDS, capability=capability)
    steps = [step(1)]
    summary = apply(steps, [], setting)
    assert programmatic(drv, 1) == [] and drv.instantiated == [] and REPLACED == {}
    assert reason in summary.off_reason


def test_eager_steps_are_left_alone(fake):
    fake(DIAMOND, KINDS)
    eager = object()
    steps = [eager]
    summary = apply(steps, [])
    assert steps == [eager] and summary.converted == 0


def test_kernels_no_registry_knows_are_looked_for_among_the_cupy_objects_and_else_not_scanned(fake, monkeypatch):
    """Issue 30: a kernel built with plain cupy.RawKernel/RawModule is placed by the finder (given what
    the captured function reaches); one it cannot place is counted as not scanned, not as not waiting."""
    drv = fake({1: [(10, 11), (11, 20), (20, 21)]}, {**KINDS, 11: "raw_wait", 20: "unplaced"})
    monkeypatch.setattr(pdl, "known_module", lambda handle, device: None)
    asked: list = []

    class Finder:
        def __init__(self, device, reachable):
            self.reachable = reachable

        def find(self, handle, name):
            asked.append((handle, name, tuple(self.reachable())))
            return Known() if name in ("raw_wait", "wait_a") else None

    monkeypatch.setattr(pdl, "KernelFinder", Finder)
    WAITS.add("raw_wait")
    try:
        graphs = RecordingGraphs([step(1)], [], needed=True)
        summary, _ = pdl.apply_pdl([step(1)], graphs.tops, graphs.bodies, "auto", 0, "f", lambda: ["reached"])
    finally:
        WAITS.discard("raw_wait")
    assert programmatic(drv, 1) == [(10, 11), (20, 21)]
    assert summary.kept == {"consumer_not_scanned": 1}
    assert summary.not_converted == {"unplaced": pdl.NOT_FOUND}
    assert {name for _, name, _ in asked} == {"wait_a", "raw_wait", "unplaced"}
    assert all(handle == 7 and reached == ("reached",) for handle, _, reached in asked)


def test_a_kernel_built_before_sm90_does_not_wait_and_one_the_driver_cannot_describe_is_not_scanned(fake, monkeypatch):
    drv = fake({1: [(10, 11), (11, 12)]}, KINDS)
    versions = {10: 90, 11: 80}  # 12: the driver refuses to say

    def ptx_version(attribute, func):
        return (OK, versions[func]) if func in versions else (BAD, None)

    monkeypatch.setattr(drv, "cuFuncGetAttribute", ptx_version)
    summary = apply([step(1)], [])
    assert summary.converted == 0
    assert summary.kept == {"consumer_does_not_wait": 1, "consumer_not_scanned": 1}
    assert "compute_80" in summary.not_converted["wait_b"]
    assert summary.not_converted["wait_c"].startswith("not scanned")
