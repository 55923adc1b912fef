"""A fake ``cuda.bindings.driver`` over a described graph, for the graph reader's tests on the CPU.

``graphs``: graph handle -> its node handles; ``nodes``: node handle -> (node type, parameters);
``layouts``: function -> [(offset, size)] per kernel parameter (``cuFuncGetParamInfo``); ``names``:
function -> its name. ``describes_conditionals=False`` answers ``cuGraphNodeGetParams`` as drivers
before CUDA 13.2 do (cuda.core finds they cannot describe a conditional node). ``listed`` records
each graph whose nodes were listed, to check a graph is read once. Callers import it only after
``extras.need("cuda.bindings.driver", ...)`` found the bindings.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

from cuda.bindings import driver

OK, BAD = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE


class FakeDriver:
    """The cuda.bindings.driver calls the reader makes, answered from the description."""

    CUresult, CUgraphNodeType, CUmemorytype = driver.CUresult, driver.CUgraphNodeType, driver.CUmemorytype

    def __init__(self, graphs: dict[int, list[int]], nodes: dict[int, tuple[Any, Any]],
                 layouts: Optional[dict[int, list[tuple[int, int]]]] = None, names: Optional[dict[int, str]] = None,
                 describes_conditionals: bool = True):
        self.graphs, self.nodes = graphs, nodes
        self.layouts, self.names = layouts or {}, names or {}
        self.describes_conditionals = describes_conditionals
        self.listed: list[int] = []

    def CUgraph(self, handle: int) -> int:
        return handle

    def cuGraphGetNodes(self, graph: int, count: int) -> tuple[Any, Any, int]:
        nodes = self.graphs.get(graph)
        if nodes is None:
            return (BAD, None, 0)
        if count:
            self.listed.append(graph)
        return (OK, [] if count == 0 else nodes[:count], len(nodes))

    def cuGraphNodeGetType(self, node: int) -> tuple[Any, Any]:
        return (OK, self.nodes[node][0])

    def cuGraphKernelNodeGetParams(self, node: int) -> tuple[Any, Any]:
        return (OK, self.nodes[node][1])

    def cuFuncGetParamInfo(self, func: int, index: int) -> tuple[Any, int, int]:
        layout = self.layouts.get(func, [])
        return (OK, *layout[index]) if index < len(layout) else (BAD, 0, 0)

    def cuFuncGetName(self, func: int) -> tuple[Any, bytes]:
        return (OK, self.names.get(func, f"kernel{func}").encode())

    def cuGraphMemcpyNodeGetParams(self, node: int) -> tuple[Any, Any]:
        return (OK, self.nodes[node][1])

    def cuGraphMemsetNodeGetParams(self, node: int) -> tuple[Any, Any]:
        return (OK, self.nodes[node][1])

    def cuGraphChildGraphNodeGetGraph(self, node: int) -> tuple[Any, Any]:
        return (OK, self.nodes[node][1])

    def cuGraphMemAllocNodeGetParams(self, node: int) -> tuple[Any, Any]:
        return (OK, SimpleNamespace(dptr=0x7F00_0000_0000, bytesize=4096))

    def cuGraphNodeGetParams(self, node: int) -> tuple[Any, Any]:
        if not self.describes_conditionals:
            return (driver.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
        params = self.nodes[node][1]
        return (BAD, None) if params is None else (OK, params)
