"""Graph breaks: ops that run eagerly between the captured pieces of a PIECEWISE graph.

Under capture CuPy refuses cuBLAS, cuSOLVER, cuSPARSE, cuRAND and device-to-host reads. Marking
such an op with ``graph_break`` lets a PIECEWISE capture record a sequence instead of one graph:
piece, eager op, piece, ... . In FULL mode (and whenever nothing is being recorded) a graph break
is just a call of the op. The host backend does the same: in PIECEWISE mode the op runs on plain
NumPy arrays (host reads allowed), in FULL mode it is refused where CuPy would refuse it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Optional, Protocol, TypeVar

from .routing import graph_break_op

F = TypeVar("F", bound=Callable[..., Any])

_local = threading.local()


class BreakRecorder(Protocol):
    """What a backend's PIECEWISE capture installs while it records (one per capturing thread)."""

    def break_at(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """End the current piece, record ``fn`` as an eager step, start the next piece."""


def active_recorder() -> Optional[BreakRecorder]:
    return getattr(_local, "recorder", None)


class recording_breaks:
    """Context manager that routes this thread's ``graph_break`` calls to ``recorder``."""

    def __init__(self, recorder: BreakRecorder):
        self.recorder = recorder

    def __enter__(self) -> BreakRecorder:
        self.previous = active_recorder()
        _local.recorder = self.recorder
        return self.recorder

    def __exit__(self, *exc: Any) -> None:
        _local.recorder = self.previous


def graph_break(fn: F) -> F:
    """Mark ``fn`` as an op that runs eagerly in PIECEWISE mode.

    Use as a decorator (``@graph_break``) or around a call (``graph_break(cupy.matmul)(a, b)``).
    The op must return an array or a tuple/list/dict of arrays: its results are copied into
    buffers the later pieces were captured with, so those pieces read this call's values. In FULL
    mode the op is captured like everything else (you assert it is capturable there; a cuBLAS
    call makes the FULL key fall back, on the host backend too).
    """
    if getattr(fn, "__cupygraph_graph_break__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with graph_break_op():  # (an eager step routes no library call: it runs as at the replays)
            recorder = active_recorder()
            if recorder is None:
                return fn(*args, **kwargs)
            return recorder.break_at(fn, args, kwargs)

    # A marker attribute on a function object, and functools.wraps keeps fn's signature: neither is
    # expressible to the type checker.
    wrapper.__cupygraph_graph_break__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
