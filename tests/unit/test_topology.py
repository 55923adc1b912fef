"""Topology snapshots (issue 17): the diff in words, the JSON file, the walker over a fake driver and
the assertion's compare / update / skip flow (the real graph is read on the GPU: tests/gpu)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from extras import need

import cupygraph.backends.driver.topology as cupy_topology
from cupygraph.api.jit import GraphedFunction
from cupygraph.backends.host.backend import HostBackend
from cupygraph.cache import CUDAGraphRegistry
from cupygraph.config.model import CUDAGraphConfig
from cupygraph.diagnostics.topology import (
    SnapshotError,
    diff_topologies,
    dumps_snapshot,
    load_snapshot,
    run_lengths,
    save_snapshot,
    snapshot_data,
)
from cupygraph.testing import assert_graph_topology


def graph(kernels=(("step", 32),), memcpy=(), memset=(), nbytes=1000, pieces=1, breaks=(), conditional=(),
          **kinds):
    count = sum(n for _, n in kernels)
    return {"pieces": pieces, "graph_breaks": list(breaks),
            "nodes_by_kind": {"kernel": count, "memcpy": len(memcpy), **kinds},
            "kernels": [list(k) for k in kernels], "memcpy": list(memcpy), "memset": list(memset),
            "conditional": list(conditional), "bytes": nbytes}


def test_identical_descriptions_have_no_difference():
    assert diff_topologies({"FULL size=8": graph()}, {"FULL size=8": graph()}) == []


def test_a_kernel_launched_once_more_is_said_in_words():
    lines = diff_topologies({"FULL size=8": graph()}, {"FULL size=8": graph(kernels=(("step", 33),))})
    assert lines == ["FULL size=8: kernel `step` now launched 33 times, was 32"]


def test_new_and_vanished_kernels_memcpys_and_graphs_are_named():
    old = {"FULL size=8": graph(kernels=(("a", 1), ("b", 2))), "FULL size=4": graph()}
    new = {"FULL size=8": graph(kernels=(("a", 1), ("c", 1)), memcpy=("device to device, 4,096 bytes",)),
           "FULL size=16": graph()}
    lines = diff_topologies(old, new)
    assert "FULL size=8: kernel `b` is gone (was launched 2 times)" in lines
    assert "FULL size=8: kernel `c` appeared (launched 1 time)" in lines
    assert "FULL size=8: a memcpy node appeared (device to device, 4,096 bytes)" in lines
    assert "FULL size=4: this graph was not captured (it is in the snapshot)" in lines
    assert "FULL size=16: a new graph was captured (not in the snapshot)" in lines


def test_same_kernels_in_another_order_name_the_first_launch_that_differs():
    lines = diff_topologies({"g": graph(kernels=(("a", 1), ("b", 1)))}, {"g": graph(kernels=(("b", 1), ("a", 1)))})
    assert lines == ["g: kernels run in another order: launch 1 is now `b`, was `a`"]


def test_pieces_graph_breaks_conditionals_and_other_node_kinds_are_compared():
    old = graph(pieces=2, breaks=("solve",))
    new = graph(pieces=3, breaks=("solve", "norm"), conditional=("while, 1 body",), host=1)
    lines = diff_topologies({"PIECEWISE size=8": old}, {"PIECEWISE size=8": new})
    assert set(lines) == {
        "PIECEWISE size=8: now 3 pieces, was 2",
        "PIECEWISE size=8: a graph break appeared (norm)",
        "PIECEWISE size=8: a conditional node appeared (while, 1 body)",
        "PIECEWISE size=8: `host` nodes: now 1, was 0",
    }


@pytest.mark.parametrize(("new_bytes", "changed"), [(1090, False), (910, False), (1200, True), (700, True)])
def test_bytes_held_compare_within_the_tolerance(new_bytes, changed):
    lines = diff_topologies({"g": graph(nbytes=1000)}, {"g": graph(nbytes=new_bytes)}, bytes_tolerance=0.1)
    assert bool(lines) == changed
    if changed:
        assert lines[0].startswith(f"g: bytes held now {new_bytes:,}, was 1,000")


def test_snapshot_files_round_trip_and_stay_readable(tmp_path):
    chain = run_lengths(["affine", "squash"] * 3)
    graphs = {"FULL size=8": graph(kernels=chain, memcpy=("device to device, 64 bytes",))}
    path = save_snapshot(tmp_path / "deep" / "f.json", "f", graphs)
    assert load_snapshot(path) == graphs
    text = path.read_text()
    assert json.loads(text) == snapshot_data("f", graphs)
    assert '"memcpy": ["device to device, 64 bytes"]' in text  # short lists on one line
    assert text == dumps_snapshot(snapshot_data("f", graphs))


@pytest.mark.parametrize(("content", "match"), [
    ("{not json", "not JSON"),
    ('{"graphs": {}}', "not a cupygraph topology snapshot"),
    ('{"cupygraph_topology": 1, "graphs": {"g": {"kernels": [["a"]]}}}', r"graphs\.g: field 'kernels'"),
    ('{"cupygraph_topology": 1, "graphs": {"g": {"bytes": "many"}}}', r"graphs\.g: field 'bytes'"),
])
def test_a_malformed_snapshot_names_the_file_and_field(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=match) as err:
        load_snapshot(path)
    assert str(path) in str(err.value)


def test_run_lengths_keep_the_launch_order():
    assert run_lengths(["a", "a", "b", "a"]) == [["a", 2], ["b", 1], ["a", 1]]


# -- the assertion's flow, on a backend that says it is CuPy and a described recording -------------


class _PretendCupy(HostBackend):
    name = "cupy"


@pytest.fixture
def described(monkeypatch):
    """The backend reader stands in for cuda-bindings: the kernel count comes from ``knob``."""
    knob = {"launches": 32}

    def fake(recording):
        return {"pieces": 1, "graph_breaks": [], "nodes_by_kind": {"kernel": knob["launches"]},
                "kernels": ["step"] * knob["launches"], "memcpy": [], "memset": [], "conditional": []}

    monkeypatch.setattr(cupy_topology, "recording_topology", fake)
    return knob


def _jitted():
    config = CUDAGraphConfig(backend="host", capture_sizes=[4, 8])
    return GraphedFunction(lambda x: x * 2, registry=CUDAGraphRegistry(config, backend=_PretendCupy()))


def test_missing_snapshot_fails_then_update_writes_and_later_runs_compare(tmp_path, described):
    path = tmp_path / "snap.json"
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    with pytest.raises(pytest.fail.Exception, match="--cupygraph-update-snapshots"):
        assert_graph_topology(_jitted(), x, snapshot=path)
    assert not path.exists()
    assert_graph_topology(_jitted(), x, snapshot=path, update=True)
    assert set(load_snapshot(path)) == {"FULL size=8"}
    assert_graph_topology(_jitted(), x, snapshot=path)  # unchanged: passes
    described["launches"] = 33
    with pytest.raises(pytest.fail.Exception, match="kernel `step` now launched 33 times, was 32"):
        assert_graph_topology(_jitted(), x, snapshot=path)
    assert_graph_topology(_jitted(), x, snapshot=path, update=True)
    assert load_snapshot(path)["FULL size=8"]["kernels"] == [["step", 33]]


def test_sizes_capture_more_graphs_into_the_snapshot(tmp_path, described):
    path = tmp_path / "snap.json"
    assert_graph_topology(_jitted(), np.ones((3, 2), np.float32), snapshot=path, sizes=[8], update=True)
    assert set(load_snapshot(path)) == {"FULL size=4", "FULL size=8"}


def test_the_host_backend_skips_with_the_reason(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="host backend records no CUDA graph"):
        assert_graph_topology(lambda x: x + 1, np.ones((2, 2)), snapshot=tmp_path / "s.json",
                              config={"backend": "host"})


FIXTURE_TEST = """
import numpy as np
import cupygraph.backends.driver.topology as cupy_topology
from cupygraph.api.jit import GraphedFunction
from cupygraph.backends.host.backend import HostBackend
from cupygraph.cache import CUDAGraphRegistry
from cupygraph.config.model import CUDAGraphConfig


class PretendCupy(HostBackend):
    name = "cupy"


def test_pipeline(graph_topology, monkeypatch):
    import os
    n = int(os.environ.get("LAUNCHES", "32"))
    monkeypatch.setattr(cupy_topology, "recording_topology", lambda rec: {
        "pieces": 1, "graph_breaks": [], "nodes_by_kind": {"kernel": n}, "kernels": ["step"] * n,
        "memcpy": [], "memset": [], "conditional": []})
    config = CUDAGraphConfig(backend="host", capture_sizes=[4])
    f = GraphedFunction(lambda x: x + 1, registry=CUDAGraphRegistry(config, backend=PretendCupy()))
    graph_topology(f, np.ones((4, 2), np.float32))
"""


def test_the_fixture_keeps_snapshots_beside_the_test_and_the_option_rewrites_them(pytester, monkeypatch):
    from tests.unit.test_testing_plugin import _plugin_args

    pytester.makepyfile(test_pipe=FIXTURE_TEST)
    pytester.runpytest(*_plugin_args()).assert_outcomes(failed=1)  # no snapshot yet
    pytester.runpytest(*_plugin_args(), "--cupygraph-update-snapshots").assert_outcomes(passed=1)
    snap = pytester.path / "__graph_snapshots__" / "test_pipe" / "test_pipeline.json"
    assert json.loads(snap.read_text())["graphs"]["FULL size=4"]["kernels"] == [["step", 32]]
    pytester.runpytest(*_plugin_args()).assert_outcomes(passed=1)
    monkeypatch.setenv("LAUNCHES", "33")
    result = pytester.runpytest(*_plugin_args())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*kernel `step` now launched 33 times, was 32*"])


# -- the CuPy backend's reader over a fake driver ---------------------------------------------------


def test_the_walker_reads_kinds_names_copies_memsets_and_conditional_bodies():
    driver = need("cuda.bindings.driver", "cuda", what="reading a graph built with the driver API")
    ok, types, mem = driver.CUresult.CUDA_SUCCESS, driver.CUgraphNodeType, driver.CUmemorytype
    copy = SimpleNamespace(srcMemoryType=mem.CU_MEMORYTYPE_DEVICE, dstMemoryType=mem.CU_MEMORYTYPE_DEVICE,
                           WidthInBytes=4096, Height=1, Depth=1)
    conditional = SimpleNamespace(conditional=SimpleNamespace(
        type=driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE, phGraph_out=[300], size=1))
    nodes = {1: (types.CU_GRAPH_NODE_TYPE_MEMCPY, copy),
             2: (types.CU_GRAPH_NODE_TYPE_KERNEL, SimpleNamespace(func=7, kern=0)),
             3: (types.CU_GRAPH_NODE_TYPE_KERNEL, SimpleNamespace(func=7, kern=0)),
             4: (types.CU_GRAPH_NODE_TYPE_CONDITIONAL, conditional),
             5: (types.CU_GRAPH_NODE_TYPE_KERNEL, SimpleNamespace(func=9, kern=0)),
             6: (types.CU_GRAPH_NODE_TYPE_MEMSET, SimpleNamespace(elementSize=4, width=256, height=1))}
    graphs = {100: [1, 2, 3, 4, 6], 300: [5], 200: [2]}

    class FakeDriver:
        CUresult, CUgraphNodeType = driver.CUresult, types

        def CUgraph(self, handle):
            return handle

        def cuGraphGetNodes(self, g, count):
            return (ok, graphs[g][:count] if count else None, len(graphs[g]))

        def cuGraphNodeGetType(self, node):
            return (ok, nodes[node][0])

        def cuGraphKernelNodeGetParams(self, node):
            return (ok, nodes[node][1])

        def cuFuncGetName(self, func):
            return (ok, {7: b"step", 9: b"body"}[func])

        def cuGraphMemcpyNodeGetParams(self, node):
            return (ok, nodes[node][1])

        def cuGraphMemsetNodeGetParams(self, node):
            return (ok, nodes[node][1])

        def cuGraphNodeGetParams(self, node):
            return (ok, nodes[node][1])

    class Step:  # a piece: a graph with its un-instantiated ``graph`` handle
        def __init__(self, handle):
            self.graph = handle

    def norm(x):
        return x

    from cupygraph.backends.driver.reading import RecordingGraphs

    steps = [Step(100), SimpleNamespace(fn=norm, static=None), Step(200)]
    graphs = RecordingGraphs(steps, (), needed=True, drv=FakeDriver())
    recording = SimpleNamespace(steps=steps, snapshot_of=graphs.top)
    found = cupy_topology.recording_topology(recording)
    assert found == {
        "pieces": 2, "graph_breaks": ["norm"],
        "nodes_by_kind": {"conditional": 1, "kernel": 4, "memcpy": 1, "memset": 1},
        "kernels": ["step", "step", "body", "step"],
        "memcpy": ["device to device, 4,096 bytes"], "memset": ["1,024 bytes"],
        "conditional": ["while, 1 body"],
    }
