"""The CUDA runtime as conditional nodes need it: probed once (CUDA 12.4+, cuda-bindings with the calls
below; SWITCH nodes 12.8+), and the calls ``nodes`` records with, in the shapes these bindings take.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from ..errors import CaptureError

__all__ = ["CudaRuntime", "conditional_runtime"]

_MIN_CUDA = 12040  # conditional nodes and device-side cudaGraphSetConditional
_EMPTY_BODY_FIXED = 12080  # older drivers hang on a conditional node with an empty body graph
_SWITCH_CUDA = 12080  # SWITCH conditional nodes (driver and runtime)
_REQUIRED = (
    "cudaStreamGetCaptureInfo", "cudaGraphConditionalHandleCreate", "cudaGraphAddNode",
    "cudaStreamUpdateCaptureDependencies", "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture",
    "cudaGraphNodeParams", "cudaGraphConditionalNodeType", "cudaGraphConditionalHandleFlags",
)


def _version(found: int) -> str:
    return f"{found // 1000}.{found % 1000 // 10}"


class CudaRuntime:
    """The cuda.bindings runtime plus the call shapes this version of the bindings uses."""

    def __init__(self, rt: Any, driver_version: int, runtime_version: Optional[int] = None):
        self.rt = rt
        self.driver_version = driver_version
        self.runtime_version = driver_version if runtime_version is None else runtime_version
        self.success = rt.cudaError_t.cudaSuccess
        # cuda-bindings 13 (and CUDA 12.3+ *_v2 forms) take edge data beside the dependencies.
        self.edge_data = "dependencyData" in (rt.cudaGraphAddNode.__doc__ or "").split("\n", 1)[0]
        self.relaxed = rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
        self.active = rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive

    @property
    def switch_problem(self) -> Optional[str]:
        """Why SWITCH nodes cannot be recorded here (the driver, runtime or bindings predate 12.8), or None."""
        if not hasattr(self.rt.cudaGraphConditionalNodeType, "cudaGraphCondTypeSwitch"):
            return "these cuda-bindings lack cudaGraphCondTypeSwitch; SWITCH nodes need cuda-bindings 12.8 or newer"
        for what, found in (("driver", self.driver_version), ("runtime", self.runtime_version)):
            if found < _SWITCH_CUDA:
                return f"the CUDA {what} is {_version(found)}; SWITCH conditional nodes need CUDA 12.8 or newer"
        return None

    def check(self, call: str, result: Any) -> Any:
        """The values after the error code; CaptureError naming ``call`` when it failed."""
        parts = result if isinstance(result, tuple) else (result,)
        err = parts[0]
        if err != self.success:
            self.rt.cudaGetLastError()  # leave no error behind for the next caller
            name = getattr(err, "name", None) or repr(err)
            raise CaptureError(f"{call} failed with {name} while recording a CUDA conditional node")
        rest = parts[1:]
        return rest[0] if len(rest) == 1 else (rest or None)

    def capture_info(self, stream: Any) -> tuple[Any, list[Any], Any]:
        info = self.check("cudaStreamGetCaptureInfo", self.rt.cudaStreamGetCaptureInfo(stream))
        if len(info) >= 6:  # status, id, graph, deps, edge data, count
            status, _, graph, deps, edges, count = info[:6]
        else:  # older bindings: no edge data
            status, _, graph, deps, count = info[:5]
            edges = None
        if status != self.active:
            raise CaptureError(f"cudaStreamGetCaptureInfo says the stream is not capturing ({status})")
        deps = list(deps or [])[: int(count)]
        edges = list(edges)[: len(deps)] if edges and deps else None
        return graph, deps, edges

    def create_handle(self, graph: Any) -> Any:
        assign = self.rt.cudaGraphConditionalHandleFlags.cudaGraphCondAssignDefault
        return self.check("cudaGraphConditionalHandleCreate",
                          self.rt.cudaGraphConditionalHandleCreate(graph, 0, int(assign)))

    def add_conditional(self, graph: Any, deps: list[Any], edges: Any, handle: Any, kind: Any,
                        size: int = 1) -> tuple[Any, list[Any]]:
        """A conditional node of type ``kind`` with ``size`` bodies after ``deps``: (node, its body graphs)."""
        rt = self.rt
        params = rt.cudaGraphNodeParams()  # zero-filled, as cudaGraphAddNode requires
        params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
        params.conditional.handle = handle
        params.conditional.type = kind
        params.conditional.size = size
        if self.edge_data:
            result = rt.cudaGraphAddNode(graph, deps or None, edges, len(deps), params)
        else:
            result = rt.cudaGraphAddNode(graph, deps or None, len(deps), params)
        node = self.check("cudaGraphAddNode", result)
        # The driver fills phGraph_out with `size` body graphs, owned by the node.
        return node, list(params.conditional.phGraph_out)[:size]

    def set_dependencies(self, stream: Any, nodes: list[Any]) -> None:
        flag = int(self.rt.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies)
        if self.edge_data:
            result = self.rt.cudaStreamUpdateCaptureDependencies(stream, nodes, None, len(nodes), flag)
        else:
            result = self.rt.cudaStreamUpdateCaptureDependencies(stream, nodes, len(nodes), flag)
        self.check("cudaStreamUpdateCaptureDependencies", result)

    def begin_capture_to(self, stream: Any, graph: Any, deps: list[Any], what: str) -> None:
        self.check(f"cudaStreamBeginCaptureToGraph ({what})",
                   self.rt.cudaStreamBeginCaptureToGraph(stream, graph, deps or None, None, len(deps), self.relaxed))

    def pad_empty_body(self, graph: Any) -> None:
        if self.driver_version >= _EMPTY_BODY_FIXED:
            return
        result = self.rt.cudaGraphGetNodes(graph)
        if result[0] == self.success and int(result[-1]) == 0:
            self.check("cudaGraphAddEmptyNode", self.rt.cudaGraphAddEmptyNode(graph, None, 0))


@functools.cache
def conditional_runtime() -> tuple[Optional[CudaRuntime], Optional[str]]:
    """The CUDA runtime calls conditional nodes need, and None; or None and why they are unavailable
    (checked once per process)."""
    try:
        import cuda.bindings
        from cuda.bindings import runtime as rt
    except Exception as err:
        return None, (f"cuda-bindings is not importable ({type(err).__name__}: {err}); "
                      "install cuda-bindings matching the CUDA driver (12.4 or newer)")
    version = getattr(cuda.bindings, "__version__", "?")
    missing = [name for name in _REQUIRED if not hasattr(rt, name)]
    if not missing and not hasattr(rt.cudaGraphNodeType, "cudaGraphNodeTypeConditional"):
        missing = ["cudaGraphNodeTypeConditional"]
    if missing:
        return None, f"cuda-bindings {version} lacks {', '.join(missing)}; conditional nodes need 12.4 or newer"
    for what, call in (("driver", rt.cudaDriverGetVersion), ("runtime", rt.cudaRuntimeGetVersion)):
        try:
            status, found = call()
        except Exception as exc:
            return None, f"cannot query the CUDA {what} version ({type(exc).__name__}: {exc})"
        if status != rt.cudaError_t.cudaSuccess:
            return None, f"cannot query the CUDA {what} version ({getattr(status, 'name', status)})"
        if found == 0:
            return None, f"no CUDA {what} found"
        if found < _MIN_CUDA:
            return None, f"the CUDA {what} is {_version(found)}; conditional graph nodes need CUDA 12.4 or newer"
    _, driver = rt.cudaDriverGetVersion()
    _, runtime = rt.cudaRuntimeGetVersion()
    return CudaRuntime(rt, int(driver), int(runtime)), None

