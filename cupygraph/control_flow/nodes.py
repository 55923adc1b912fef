"""Recording ``while_loop`` and ``cond`` as CUDA conditional graph nodes during a CuPy stream capture.

The steps are described in ``loops``; this module talks to the CUDA runtime through cuda-bindings
(probed once: CUDA 12.4+ and the calls below) and launches the small kernels of
``kernels/control.cu`` that set the conditional handles on the device.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from ..backends.graph_bodies import note_body
from ..errors import CaptureError

__all__ = ["capturing_stream", "conditional_runtime", "describe", "graph_cond", "graph_while", "warm_kernels"]

_MIN_CUDA = 12040  # conditional nodes and device-side cudaGraphSetConditional
_EMPTY_BODY_FIXED = 12080  # older drivers hang on a conditional node with an empty body graph
_REQUIRED = (
    "cudaStreamGetCaptureInfo", "cudaGraphConditionalHandleCreate", "cudaGraphAddNode",
    "cudaStreamUpdateCaptureDependencies", "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture",
    "cudaGraphNodeParams", "cudaGraphConditionalNodeType", "cudaGraphConditionalHandleFlags",
)


def describe(value: Any) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    kind = f"{type(value).__module__}.{type(value).__name__}"
    return f"{dtype}{list(shape)} ({kind})" if shape is not None and dtype is not None else kind


# -- capture ---------------------------------------------------------------------------------------


def capturing_stream() -> Any:
    """The current CuPy stream when it is capturing, else None; never imports CuPy itself."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        stream = cupy.cuda.get_current_stream()
        capturing = stream.is_capturing()
    except RuntimeError as err:
        if "invalidated" in str(err):
            raise CaptureError(f"the stream capture was already invalidated before a while_loop/cond: {err}") from err
        return None
    except Exception:
        return None
    return stream if capturing else None


class _Cuda:
    """The cuda.bindings runtime plus the call shapes this version of the bindings uses."""

    def __init__(self, rt: Any, driver_version: int):
        self.rt = rt
        self.driver_version = driver_version
        self.success = rt.cudaError_t.cudaSuccess
        # cuda-bindings 13 (and CUDA 12.3+ *_v2 forms) take edge data beside the dependencies.
        self.edge_data = "dependencyData" in (rt.cudaGraphAddNode.__doc__ or "").split("\n", 1)[0]
        self.relaxed = rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
        self.active = rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive

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

    def add_conditional(self, graph: Any, deps: list[Any], edges: Any, handle: Any, kind: Any) -> tuple[Any, Any]:
        rt = self.rt
        params = rt.cudaGraphNodeParams()  # zero-filled, as cudaGraphAddNode requires
        params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
        params.conditional.handle = handle
        params.conditional.type = kind
        params.conditional.size = 1
        if self.edge_data:
            result = rt.cudaGraphAddNode(graph, deps or None, edges, len(deps), params)
        else:
            result = rt.cudaGraphAddNode(graph, deps or None, len(deps), params)
        node = self.check("cudaGraphAddNode", result)
        note_body(params.conditional.phGraph_out[0])  # for the memory audit after the capture
        return node, params.conditional.phGraph_out[0]

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
def conditional_runtime() -> tuple[Optional[_Cuda], Optional[str]]:
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
            return None, (f"the CUDA {what} is {found // 1000}.{found % 1000 // 10}; conditional graph "
                          "nodes need CUDA 12.4 or newer")
    _, driver = rt.cudaDriverGetVersion()
    return _Cuda(rt, int(driver)), None


def _cuda_or_raise(what: str) -> _Cuda:
    cuda, reason = conditional_runtime()
    if cuda is None:
        raise CaptureError(f"{what} cannot be recorded into a CUDA graph: {reason}")
    return cuda


@functools.cache
def _kernel_on(name: str, device_id: int) -> Any:
    from ..kernels import get_kernel

    return get_kernel("control.cu", name)


def _kernel(name: str) -> Any:
    import cupy

    return _kernel_on(name, cupy.cuda.Device().id)


def warm_kernels() -> None:
    """Compile and load the set-kernels during an eager run (jit's warm-up), not mid-capture."""
    try:
        for name in ("cg_set_if", "cg_while_begin", "cg_while_step"):
            _kernel(name)
    except Exception:  # opportunistic: a capture reports the real problem with its context
        pass


# Integer and bool flags are read with their own width; float32/float64 compared with 0.
def _flag_kind(dtype: Any) -> Optional[int]:
    if dtype.kind in "biu" and dtype.itemsize in (1, 2, 4, 8):
        return int(dtype.itemsize)
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return -int(dtype.itemsize)
    return None


def _device_flag(value: Any, what: str) -> tuple[Any, np.int32]:
    import cupy

    if not isinstance(value, cupy.ndarray):
        raise host_value_refused(value, what)
    if value.size != 1:
        raise ValueError(f"{what} must hold exactly one element, got {describe(value)}")
    if value.device.id != cupy.cuda.Device().id:
        raise CaptureError(
            f"{what} is on device {value.device.id} but the capture runs on device {cupy.cuda.Device().id}")
    kind = _flag_kind(value.dtype)
    if kind is None:  # float16, complex: compare on the device first
        value, kind = value != 0, 1
    return value, np.int32(kind)


def _u64(handle: Any) -> np.uint64:
    return np.uint64(int(handle))


class _RefuseBreaks:
    def __init__(self, what: str):
        self.what = what

    def break_at(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = getattr(fn, "__qualname__", repr(fn))
        raise CaptureError(f"graph_break {name}() inside a {self.what} body: a conditional body cannot run "
                           "ops eagerly between pieces; move it out of the loop or use FULL mode")


def host_value_refused(value: Any, what: str) -> CaptureError:
    """The error for a condition given as a host value while a capture records it."""
    return CaptureError(f"{what} gave {describe(value)} during a CUDA graph capture; it must be a one-element "
                        "array computed on the device (a host value would be frozen into the graph)")


@contextmanager
def no_graph_breaks(what: str) -> Iterator[None]:
    """A ``graph_break`` inside a conditional body is refused (on the GPU and, while a host capture
    runs, on the host: both record bodies that cannot run ops eagerly between pieces)."""
    from ..backends.graph_breaks import recording_breaks

    with recording_breaks(_RefuseBreaks(what)):
        yield


def _record_body(cuda: _Cuda, stream: Any, node: Any, body: Any, record: Callable[[], Any], what: str) -> None:
    """Capture ``record()`` into ``body`` on ``stream``, then resume the enclosing capture after ``node``."""
    cuda.set_dependencies(stream, [node])
    try:
        outer = cuda.check("cudaStreamEndCapture (pausing the enclosing capture)", cuda.rt.cudaStreamEndCapture(stream))
    except CaptureError as err:
        raise CaptureError(f"{err}; streams forked from the capture must be joined before a {what}") from None
    try:
        cuda.begin_capture_to(stream, body, [], f"the {what} body")
    except CaptureError:
        try:
            cuda.begin_capture_to(stream, outer, [node], "resuming the enclosing capture")
        except CaptureError:
            pass  # the first failure is the one to report; the enclosing capture stays ended
        raise
    error: Optional[BaseException] = None
    try:
        with no_graph_breaks(what):
            record()
    except BaseException as err:  # the body capture must end whatever happened
        error = err
    ended = cuda.rt.cudaStreamEndCapture(stream)
    if ended[0] != cuda.success:
        cuda.rt.cudaGetLastError()
        # An invalidated body capture leaves a body graph the driver has freed; finishing or
        # destroying the enclosing graph then crashes (NVIDIA/cuda-python#2918). So the enclosing
        # capture stays ended and its graph is leaked: the process stays usable.
        if error is not None:
            raise error
        name = getattr(ended[0], "name", ended[0])
        raise CaptureError(f"the capture of a {what} body was invalidated ({name}): an op in it cannot be captured")
    try:
        cuda.pad_empty_body(body)
        cuda.begin_capture_to(stream, outer, [node], "resuming the enclosing capture")
    except CaptureError:
        if error is None:
            raise
    if error is not None:
        raise error


def graph_while(stream: Any, cond_fn: Callable[[], Any], body_fn: Callable[[], Any], limit: int) -> Any:
    import cupy

    cuda = _cuda_or_raise("while_loop")
    begin, step = _kernel("cg_while_begin"), _kernel("cg_while_step")
    handle_stream = cuda.rt.cudaStream_t(stream.ptr)
    count = cupy.empty((), dtype=cupy.int32)
    flag, kind = _device_flag(cond_fn(), "while_loop's cond_fn()")
    graph, _, _ = cuda.capture_info(handle_stream)
    handle = cuda.create_handle(graph)
    begin((1,), (1,), (_u64(handle), flag, kind, count, np.int64(limit)))
    graph, deps, edges = cuda.capture_info(handle_stream)
    node, body = cuda.add_conditional(
        graph, deps, edges, handle, cuda.rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile)

    def record() -> None:
        body_fn()
        again, again_kind = _device_flag(cond_fn(), "while_loop's cond_fn()")
        step((1,), (1,), (_u64(handle), again, again_kind, count, np.int64(limit)))

    _record_body(cuda, handle_stream, node, body, record, "while_loop")
    return count


def graph_cond(stream: Any, pred: Any, true_fn: Callable[[], Any], false_fn: Optional[Callable[[], Any]]) -> None:
    cuda = _cuda_or_raise("cond")
    set_if = _kernel("cg_set_if")
    handle_stream = cuda.rt.cudaStream_t(stream.ptr)
    flag, kind = _device_flag(pred, "cond's pred")
    graph, _, _ = cuda.capture_info(handle_stream)
    on_true = cuda.create_handle(graph)
    on_false = cuda.create_handle(graph) if false_fn is not None else on_true
    set_if((1,), (1,), (_u64(on_true), _u64(on_false), np.int32(false_fn is not None), flag, kind))
    if_type = cuda.rt.cudaGraphConditionalNodeType.cudaGraphCondTypeIf
    # Two IF nodes in sequence rather than one two-body IF node: the latter needs CUDA 12.8.
    for handle, branch, name in ((on_true, true_fn, "true_fn"), (on_false, false_fn, "false_fn")):
        if branch is None:
            continue
        graph, deps, edges = cuda.capture_info(handle_stream)
        node, body = cuda.add_conditional(graph, deps, edges, handle, if_type)
        _record_body(cuda, handle_stream, node, body, branch, f"cond {name}")
