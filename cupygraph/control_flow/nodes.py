"""Recording ``while_loop``, ``cond`` and ``switch`` as CUDA conditional graph nodes during a CuPy stream
capture.

The steps are described in ``loops``; this module records through the CUDA runtime as ``runtime``
probed it (CUDA 12.4+; SWITCH nodes 12.8+) and launches the small kernels of ``kernels/control.cu``
that set the conditional handles on the device. Each body graph is noted with its node and the
user's call that made it (``backends/graph_bodies.py``): the capture checks the bodies before
instantiation and names that call when one holds a node CUDA refuses there.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from ..backends.graph_bodies import NotedBody, note_body
from ..errors import CaptureError
from ..frames import call_site_in_stack
from .runtime import CudaRuntime, conditional_runtime

__all__ = ["capturing_stream", "conditional_runtime", "describe", "graph_cond", "graph_switch", "graph_while",
           "user_line", "warm_kernels"]


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


def _cuda_or_raise(what: str) -> CudaRuntime:
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
        for name in ("cg_set_if", "cg_set_switch", "cg_while_begin", "cg_while_step"):
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


def _device_index(value: Any, what: str) -> tuple[Any, np.int32, np.int32]:
    """A switch's index on the capture's device: (array, its bytes, whether signed); ``switch`` has
    checked its dtype and size already (``loops._check_index``)."""
    import cupy

    if not isinstance(value, cupy.ndarray):
        raise host_value_refused(value, what)
    if value.device.id != cupy.cuda.Device().id:
        raise CaptureError(
            f"{what} is on device {value.device.id} but the capture runs on device {cupy.cuda.Device().id}")
    return value, np.int32(value.dtype.itemsize), np.int32(value.dtype.kind == "i")


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


def user_line() -> str:
    """`` (at file.py:LINE: code)``: the user's line that called the control flow being recorded."""
    site = call_site_in_stack(sys._getframe(1))
    return "" if site is None else site.location()


Body = tuple[Any, Callable[[], Any], str]
"""A body graph, what records into it, and which body it is in words (``branch 2 of the switch``)."""


def _record_bodies(cuda: CudaRuntime, stream: Any, node: Any, kind: str, bodies: Sequence[Body], what: str,
                   site: str) -> None:
    """Capture each body's ``record()`` into its graph on ``stream``, then resume the enclosing capture after
    ``node`` (a conditional node of type ``kind``: ``if``, ``while`` or ``switch``; ``site``: the user's line
    that called ``what``)."""
    for graph, _, part in bodies:
        note_body(NotedBody(graph, node, kind, part + site))  # read by the capture, before and after instantiation
    cuda.set_dependencies(stream, [node])
    try:
        outer = cuda.check("cudaStreamEndCapture (pausing the enclosing capture)", cuda.rt.cudaStreamEndCapture(stream))
    except CaptureError as err:
        raise CaptureError(f"{err}; streams forked from the capture must be joined before a {what}") from None
    error: Optional[BaseException] = None
    for graph, record, part in bodies:
        try:
            cuda.begin_capture_to(stream, graph, [], f"the {part}")
        except CaptureError as err:
            error = err
            break
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
        if error is not None:
            break
        try:
            cuda.pad_empty_body(graph)
        except CaptureError as err:
            error = err
            break
    try:
        cuda.begin_capture_to(stream, outer, [node], "resuming the enclosing capture")
    except CaptureError:
        if error is None:
            raise
    if error is not None:
        raise error


def graph_while(stream: Any, cond_fn: Callable[[], Any], body_fn: Callable[[], Any], limit: int, site: str) -> Any:
    """Record a WHILE loop; ``site``: the user's line that called it (`` (at file.py:LINE: code)``)."""
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
    node, (body,) = cuda.add_conditional(
        graph, deps, edges, handle, cuda.rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile)

    def record() -> None:
        body_fn()
        again, again_kind = _device_flag(cond_fn(), "while_loop's cond_fn()")
        step((1,), (1,), (_u64(handle), again, again_kind, count, np.int64(limit)))

    _record_bodies(cuda, handle_stream, node, "while", [(body, record, "body of the while_loop")], "while_loop", site)
    return count


def graph_cond(stream: Any, pred: Any, true_fn: Callable[[], Any], false_fn: Optional[Callable[[], Any]],
               site: str) -> None:
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
        node, (body,) = cuda.add_conditional(graph, deps, edges, handle, if_type)
        _record_bodies(cuda, handle_stream, node, "if", [(body, branch, f"{name} of the cond")], f"cond {name}", site)


def graph_switch(stream: Any, index: Any, branches: Sequence[Callable[[], Any]], site: str) -> None:
    """Record one SWITCH node with a body per branch; the node runs branch ``index`` (none when out of range)."""
    cuda = _cuda_or_raise("switch")
    problem = cuda.switch_problem
    if problem is not None:
        raise CaptureError(f"switch cannot be recorded into a CUDA graph: {problem}")
    set_switch = _kernel("cg_set_switch")
    handle_stream = cuda.rt.cudaStream_t(stream.ptr)
    value, nbytes, signed = _device_index(index, "switch's index")
    graph, _, _ = cuda.capture_info(handle_stream)
    handle = cuda.create_handle(graph)
    set_switch((1,), (1,), (_u64(handle), value, nbytes, signed, np.uint32(len(branches))))
    graph, deps, edges = cuda.capture_info(handle_stream)
    node, bodies = cuda.add_conditional(
        graph, deps, edges, handle, cuda.rt.cudaGraphConditionalNodeType.cudaGraphCondTypeSwitch, len(branches))
    if len(bodies) != len(branches):
        raise CaptureError(f"cudaGraphAddNode gave {len(bodies)} body graphs for a switch of {len(branches)} branches")
    recorded = [(body, branch, f"branch {i} of the switch") for i, (body, branch) in enumerate(zip(bodies, branches))]
    _record_bodies(cuda, handle_stream, node, "switch", recorded, "switch", site)
