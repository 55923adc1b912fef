"""PIECEWISE capture on the CuPy backend: graph breaks end one piece and start the next, and the
op at a break is replayed eagerly between the pieces (``EagerStep``). Every piece, the one piece of a
FULL capture too, ends in ``end_piece``: its conditional bodies are checked before it is instantiated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy

from ...errors import CaptureError
from ...pytree import flatten
from ..base import ReplayMismatch
from ..driver.reading import ConditionalBodyCheck

_runtime = cupy.cuda.runtime
# Device-to-device: the driver need not look up where the pointers live (memcpyDefault costs a
# few microseconds more per call); peer copies between devices are device-to-device too.
MEMCPY_D2D = _runtime.memcpyDeviceToDevice


class EagerStep:
    """A graph-break op replayed eagerly; its results land in the buffers later pieces read."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], static: Any):
        # Holding the arguments keeps their pool blocks from being reused while the graph lives.
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.static = static
        self.static_leaves, _ = flatten(static, lambda v: isinstance(v, cupy.ndarray))
        # The common case, one array result, skips the pytree walk on every replay.
        self._single = isinstance(static, cupy.ndarray)
        self._out = static if self._single and "out" not in kwargs and _writes_out(fn, static) else None
        """The result buffer, given as ``out=``: the op writes where later pieces read (no copy, no
        allocation: about 7 µs of Python less per replay on an H100)."""

    def launch(self) -> None:
        if self._out is not None:
            self.fn(*self.args, out=self._out, **self.kwargs)
            return
        result = self.fn(*self.args, **self.kwargs)
        if self._single and type(result) is cupy.ndarray:
            fresh = [result]
        else:
            fresh, _ = flatten(result, lambda v: isinstance(v, cupy.ndarray))
        for i, (static, new) in enumerate(zip(self.static_leaves, fresh)):
            if new is static:
                continue
            if not isinstance(new, cupy.ndarray) or new.shape != static.shape or new.dtype != static.dtype:
                raise ReplayMismatch(  # the front doors drop the graph and run the call eagerly, as on the host
                    f"graph_break op {getattr(self.fn, '__name__', self.fn)} returned {_shape_of(new)} for result "
                    f"{i} on replay but {_shape_of(static)} at capture; its results must keep shape and dtype"
                )
            if new._c_contiguous and static._c_contiguous and new.data.device_id == static.data.device_id:
                # One async memcpy costs a few microseconds of Python less than an elementwise copy kernel.
                if new.nbytes:
                    _runtime.memcpyAsync(static.data.ptr, new.data.ptr, new.nbytes, MEMCPY_D2D,
                                         cupy.cuda.get_current_stream().ptr)
            else:
                static[...] = new


def _writes_out(fn: Callable[..., Any], result: Any) -> bool:
    """Whether ``fn`` is one of CuPy's products that compute straight into a C-contiguous ``out=``
    of the result's shape and dtype (the same kernel as without ``out``)."""
    return (fn is cupy.matmul or fn is cupy.dot) and bool(result._c_contiguous)


def _shape_of(value: Any) -> str:
    return f"{value.dtype}{list(value.shape)}" if hasattr(value, "shape") else type(value).__name__


def end_piece(stream: Any, bodies: ConditionalBodyCheck) -> Any:
    """End the capture on ``stream`` and instantiate its graph (CuPy's ``end_capture``), once the conditional
    bodies recorded since the last piece passed ``bodies``' check; a body that fails it ends the capture
    without instantiating its graph (the driver would refuse it with a bare status) and raises."""
    try:
        active = bool(stream.is_capturing())
    except Exception:  # invalidated: end_capture raises for it, and a failed body may be freed already
        active = False
    if active:
        try:
            bodies.before_instantiation()
        except CaptureError:
            _runtime.graphDestroy(_runtime.streamEndCapture(stream.ptr))
            raise
    return stream.end_capture()


class PiecewiseRecorder:
    """Installed while a PIECEWISE capture runs: each graph break ends a piece and starts the next."""

    def __init__(self, stream: Any, mode: int, steps: list[Any], bodies: ConditionalBodyCheck):
        self.stream, self.mode, self.steps, self.bodies = stream, mode, steps, bodies

    def break_at(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.steps.append(end_piece(self.stream, self.bodies))
        # Run the op once, uncaptured, to get results of the right shape at fixed addresses. Its
        # inputs hold no real values yet (the piece before it was only recorded): only the shapes
        # matter here; replays recompute it from real data.
        result = fn(*args, **kwargs)  # (routing nothing: ``graph_break`` runs it under ``routing.graph_break_op``)
        leaves, _ = flatten(result, lambda v: isinstance(v, cupy.ndarray))
        if not leaves or not all(isinstance(leaf, cupy.ndarray) for leaf in leaves):
            raise CaptureError(
                f"graph_break op {getattr(fn, '__name__', fn)} returned {type(result).__name__}; it must return "
                "CuPy arrays (a host value would be frozen into the graph)"
            )
        self.steps.append(EagerStep(fn, args, kwargs, result))
        self.stream.begin_capture(self.mode)
        return result
