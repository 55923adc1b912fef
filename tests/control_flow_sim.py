"""A simulated CUDA runtime for control flow's recording logic (tests/unit/test_control_flow_*.py).

A small model of stream capture, conditional handles and IF/WHILE/SWITCH nodes that also executes the
recorded graph, with a fake ``cupy`` whose current stream captures into it. It checks the order of
calls and the graph ``control_flow.nodes`` builds (a chain per level, bodies in node-owned graphs, the
enclosing capture resumed after the node), not the real driver; tests/gpu does that.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import pytest

from cupygraph.control_flow import nodes, runtime


class Err(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorIllegalState = 401
    cudaErrorStreamCaptureInvalidated = 901


class Graph:
    def __init__(self, label: str):
        self.label, self.nodes = label, []


class Node:
    def __init__(self, kind: str, deps: list, run: Optional[Callable[[], None]] = None, **extra: Any):
        self.kind, self.deps, self.run = kind, list(deps), run
        self.__dict__.update(extra)


class Params:
    def __init__(self):
        self.type = None
        self.conditional = types.SimpleNamespace(handle=None, type=None, size=0, phGraph_out=[])


class SimRuntime(types.SimpleNamespace):
    """Stream capture, conditional handles and nodes, as far as control_flow uses them."""

    def __init__(self):
        super().__init__(
            cudaError_t=Err,
            cudaStreamCaptureStatus=enum.IntEnum(
                "S", "cudaStreamCaptureStatusNone cudaStreamCaptureStatusActive", start=0),
            cudaStreamCaptureMode=enum.IntEnum("M", "cudaStreamCaptureModeRelaxed", start=2),
            cudaGraphConditionalHandleFlags=enum.IntEnum("F", "cudaGraphCondAssignDefault"),
            cudaGraphConditionalNodeType=enum.IntEnum(
                "T", "cudaGraphCondTypeIf cudaGraphCondTypeWhile cudaGraphCondTypeSwitch", start=0),
            cudaGraphNodeType=types.SimpleNamespace(cudaGraphNodeTypeConditional="conditional"),
            cudaStreamUpdateCaptureDependenciesFlags=types.SimpleNamespace(cudaStreamSetCaptureDependencies=1),
            cudaGraphNodeParams=Params,
        )
        self.captures: dict[int, Any] = {}  # stream -> [graph, deps, invalidated]
        self.handles: dict[int, int] = {}
        self.calls: list[str] = []
        self.fail: dict[str, Err] = {}

    def _result(self, name: str, *values: Any) -> tuple:
        self.calls.append(name)
        if name in self.fail:
            return (self.fail[name],) + (None,) * len(values)
        return (Err.cudaSuccess, *values)

    def cudaStream_t(self, ptr: int) -> int:
        return int(ptr)

    def cudaGetLastError(self) -> tuple:
        return (Err.cudaSuccess,)

    def cudaStreamGetCaptureInfo(self, s: int) -> tuple:
        cap = self.captures.get(s)
        if cap is None:
            return self._result("cudaStreamGetCaptureInfo", 0, 0, None, [], None, 0)
        return self._result("cudaStreamGetCaptureInfo", 1, 7, cap[0], list(cap[1]), None, len(cap[1]))

    def cudaGraphConditionalHandleCreate(self, graph: Graph, default: int, flags: int) -> tuple:
        handle = len(self.handles) * 16  # 0 is a valid handle too
        self.handles[handle] = default
        return self._result("cudaGraphConditionalHandleCreate", handle)

    def cudaGraphAddNode(self, graph, deps, edges, count, params):
        """cudaGraphAddNode(graph, pDependencies, dependencyData, size_t numDependencies, nodeParams)"""
        result = self._result("cudaGraphAddNode", None)
        if result[0] != Err.cudaSuccess:
            return result
        size, kind = params.conditional.size, params.conditional.type
        assert params.type == "conditional" and count == len(deps or [])
        assert size >= 1 if kind.name == "cudaGraphCondTypeSwitch" else size == 1  # as the driver allows
        bodies = [Graph(f"body {i} of {kind.name}") for i in range(size)]
        node = Node("conditional", deps or [], cond_type=kind, handle=params.conditional.handle, body=bodies[0],
                    bodies=bodies)
        graph.nodes.append(node)
        params.conditional.phGraph_out = bodies
        return (Err.cudaSuccess, node)

    def cudaStreamUpdateCaptureDependencies(self, s, nodes, edges, count, flags):
        result = self._result("cudaStreamUpdateCaptureDependencies")
        if result[0] == Err.cudaSuccess:
            self.captures[s][1] = list(nodes)
        return result

    def cudaStreamEndCapture(self, s: int) -> tuple:
        cap = self.captures.pop(s, None)
        if cap is None:
            return (Err.cudaErrorIllegalState, None)
        if cap[2]:
            return (Err.cudaErrorStreamCaptureInvalidated, None)
        return self._result("cudaStreamEndCapture", cap[0])

    def cudaStreamBeginCaptureToGraph(self, s, graph, deps, edges, count, mode):
        result = self._result("cudaStreamBeginCaptureToGraph")
        if result[0] == Err.cudaSuccess:
            assert s not in self.captures, "a stream can capture one graph at a time"
            self.captures[s] = [graph, list(deps or []), False]
        return result

    def cudaGraphGetNodes(self, graph: Graph) -> tuple:
        return self._result("cudaGraphGetNodes", None, len(graph.nodes))

    def cudaGraphAddEmptyNode(self, graph: Graph, deps: Any, count: int) -> tuple:
        node = Node("empty", deps or [])
        graph.nodes.append(node)
        return self._result("cudaGraphAddEmptyNode", node)

    # -- what the test drives ----------------------------------------------------------------------

    def launch(self, s: int, name: str, run: Callable[[], None]) -> None:
        """A kernel launch on a capturing stream becomes a node after the capture dependencies."""
        cap = self.captures[s]
        node = Node("kernel", cap[1], run, name=name)
        cap[0].nodes.append(node)
        cap[1] = [node]

    def execute(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.kind == "kernel":
                node.run()
            elif node.kind == "conditional" and node.cond_type.name == "cudaGraphCondTypeIf":
                if self.handles[node.handle]:
                    self.execute(node.body)
            elif node.kind == "conditional" and node.cond_type.name == "cudaGraphCondTypeSwitch":
                value = self.handles[node.handle]
                if value < len(node.bodies):  # a value at or past the size runs no body
                    self.execute(node.bodies[value])
            elif node.kind == "conditional":
                while self.handles[node.handle]:
                    self.execute(node.body)


def assert_chain(graph: Graph, first_deps: list) -> None:
    """Every node depends on exactly the one before it; bodies likewise, recursively."""
    previous = list(first_deps)
    for node in graph.nodes:
        assert node.deps == previous, f"{getattr(node, 'name', node.kind)} in {graph.label} has the wrong deps"
        previous = [node]
        if node.kind == "conditional":
            for body in node.bodies:
                assert_chain(body, [])


class SimArray:
    def __init__(self, value: Any, dtype: Any = np.int32):
        self.a = np.array(value, dtype=dtype).reshape(())
        self.size, self.shape, self.dtype = 1, (), self.a.dtype
        self.device = types.SimpleNamespace(id=0)

    def item(self) -> Any:
        return self.a.item()


class Sim:
    """A fake ``cupy`` whose current stream captures into the simulated runtime."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, driver_version: int = 13000):
        self.rt = SimRuntime()
        self.s = 0x5000
        sim = self
        stream = types.SimpleNamespace(ptr=self.s, is_capturing=lambda: sim.s in sim.rt.captures)
        cupy = types.ModuleType("cupy")
        cupy.ndarray = SimArray
        cupy.int32 = np.int32
        cupy.empty = lambda shape, dtype: SimArray(0, dtype)
        cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: stream,
                                          Device=lambda: types.SimpleNamespace(id=0))
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        monkeypatch.setattr(nodes, "conditional_runtime", lambda: (runtime.CudaRuntime(self.rt, driver_version), None))
        monkeypatch.setattr(nodes, "_kernel", self._kernel)

    def _kernel(self, name: str) -> Callable:
        handles = self.rt.handles

        def truth(flag: SimArray, kind: np.int32) -> bool:
            assert int(kind) == flag.dtype.itemsize
            return bool(flag.a)

        def emulate(args: tuple) -> Callable[[], None]:
            if name == "cg_while_begin":
                h, flag, kind, count, limit = args

                def run():
                    count.a[()] = 0
                    handles[int(h)] = int(truth(flag, kind) and limit != 0)
            elif name == "cg_while_step":
                h, flag, kind, count, limit = args

                def run():
                    count.a[()] += 1
                    handles[int(h)] = int(truth(flag, kind) and (limit < 0 or count.a < limit))
            elif name == "cg_set_switch":
                h, index, nbytes, signed, size = args

                def run():
                    assert (int(nbytes), bool(signed)) == (index.dtype.itemsize, index.dtype.kind == "i")
                    value = int(index.a)
                    handles[int(h)] = value if 0 <= value < int(size) else int(size)
            else:
                on_true, on_false, has_false, flag, kind = args

                def run():
                    value = truth(flag, kind)
                    handles[int(on_true)] = int(value)
                    if has_false:
                        handles[int(on_false)] = int(not value)
            return run

        def launch(grid, block, args):
            assert grid == (1,) and block == (1,)
            self.rt.launch(self.s, name, emulate(args))

        return launch

    def op(self, name: str, fn: Callable[[], None]) -> None:
        """A user kernel: ``fn`` runs when the graph executes."""
        self.rt.launch(self.s, name, fn)

    def flag(self, compute: Callable[[], Any], dtype: Any = np.int32) -> SimArray:
        """A device scalar filled in by a captured kernel."""
        out = SimArray(0, dtype)
        self.op("flag", lambda: out.a.__setitem__((), int(compute())))
        return out

    def capture(self, fn: Callable[[], Any]) -> Graph:
        top = Graph("top")
        self.rt.captures[self.s] = [top, [], False]
        fn()
        graph = self.rt.cudaStreamEndCapture(self.s)[1]
        assert graph is top
        return top
