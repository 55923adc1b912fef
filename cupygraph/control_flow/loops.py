"""Device-side control flow: ``while_loop``, ``cond`` and ``switch``, and how they run outside a capture.

Outside a capture (eager calls, mode NONE, the host backend) they run on the host: the condition
or index is read back (a one-element array, a device-to-host sync) and the body is called in a
Python loop or branch. Inside a CuPy stream capture they record a CUDA conditional node instead,
so the graph decides on the device, with no host round trip per iteration. Results are the same
either way; the bodies communicate by writing into arrays (in place or ``out=``).

How a WHILE loop is recorded while the current stream S captures graph G (IF and SWITCH nodes likewise;
a SWITCH node has one body per branch, each captured in turn before S resumes G):

1. ``cond_fn()`` is captured into G, followed by ``cg_while_begin`` (``kernels/control.cu``), which
   sets a conditional handle from the condition and zeroes the device iteration counter.
2. A WHILE node on that handle is added to G after them (``cudaGraphAddNode``) and becomes S's
   capture dependency.
3. S's capture of G is paused (``cudaStreamEndCapture`` hands G back) and S captures into the
   node's body graph (``cudaStreamBeginCaptureToGraph``): ``body_fn()``, ``cond_fn()`` and
   ``cg_while_step``, which counts the iteration and sets the handle for the next one.
4. The body capture ends and S resumes capturing G after the node, so later work sees the loop's
   results.

Each level starts from S's own capture info, so a ``cond`` in a loop body or a loop in a loop nests
by construction. The body is captured on the same stream, so it allocates from the same memory
pool arena as the rest of the function. Needs CUDA 12.4+ (driver and runtime) and cuda-bindings,
12.8+ for ``switch``; where they are missing, recording raises ``CaptureError`` and ``jit``
(``on_capture_error="fallback"``) runs the function eagerly. A loop is not recorded while other streams forked from
the capture are still unjoined (pausing the capture needs them joined).

This module holds the public functions and the host semantics (the reference every mode agrees
with); recording the conditional nodes is ``nodes``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import numpy as np

from ..backends.base import on_gpu
from ..backends.guards.host_refusal import capture_run_active, reads_allowed
from .nodes import (
    capturing_stream,
    conditional_runtime,
    describe,
    graph_cond,
    graph_switch,
    graph_while,
    host_value_refused,
    no_graph_breaks,
    user_line,
    warm_kernels,
)

__all__ = ["cond", "conditional_nodes_unavailable_reason", "inside_conditional", "switch",
           "switch_nodes_unavailable_reason", "while_loop"]

# How deep this thread is in while_loop/cond/switch bodies: collectives ask it (``inside_conditional``),
# because NCCL cannot run inside a CUDA conditional node.
_bodies = threading.local()

# -- public API ------------------------------------------------------------------------------------


def while_loop(cond_fn: Callable[[], Any], body_fn: Callable[[], Any], *, max_iters: Optional[int] = None) -> Any:
    """Run ``body_fn()`` while ``cond_fn()`` is true; return the iteration count as a 0-d int32 array.

    ``cond_fn()`` returns a one-element array (any integer, bool or float dtype; non-zero is true).
    It is evaluated once before the loop and once after every iteration, so ``iterations + 1``
    times, in every mode. ``max_iters`` (None: no limit) stops the loop after that many iterations;
    under capture it is counted on the device. The returned count is a CuPy array when the
    condition is one (under capture it is filled in on the device by every replay), else NumPy.

    Under capture the loop body is recorded once: it must launch the same work every iteration and
    keep its arrays alive for the graph's lifetime (the usual rule for captured functions).
    """
    limit = _check_max_iters(max_iters)
    for name, fn in (("cond_fn", cond_fn), ("body_fn", body_fn)):
        if not callable(fn):
            raise TypeError(f"while_loop needs a callable {name}, got {type(fn).__name__}")
    stream = capturing_stream()
    with _in_body():
        if stream is None:
            return _host_while(cond_fn, body_fn, limit)
        return graph_while(stream, cond_fn, body_fn, limit, user_line())


def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Optional[Callable[[], Any]] = None) -> None:
    """Run ``true_fn()`` when the one-element array ``pred`` is non-zero, else ``false_fn()`` (if any).

    Only the chosen branch runs; under capture the choice is made on the device by every replay.
    ``pred`` is read once, before either branch, so a branch that writes to it cannot make the
    other branch run too. Branches return nothing (they write into arrays); so does ``cond``.
    """
    for name, fn in (("true_fn", true_fn), ("false_fn", false_fn)):
        if (fn is not None or name == "true_fn") and not callable(fn):  # only false_fn is optional
            raise TypeError(f"cond needs a callable {name}, got {type(fn).__name__}")
    stream = capturing_stream()
    with _in_body():
        if stream is None:
            if on_gpu(pred):
                warm_kernels()
            chosen = true_fn if _host_truth(pred, "cond's pred") else false_fn
            if chosen is not None:
                with _as_recorded("cond"):
                    chosen()
            return None
        graph_cond(stream, pred, true_fn, false_fn, user_line())
    return None


def switch(index: Any, branches: Sequence[Callable[[], Any]]) -> None:
    """Run ``branches[index]()``, the one branch the one-element integer array ``index`` selects.

    An index out of range, negative or ``>= len(branches)``, runs no branch, in every mode (a negative
    index does not count from the end as in Python; the CUDA SWITCH node runs no body for such a value).
    ``index`` is read once, before the branch, at its own width and sign. Under capture the choice is
    made on the device by every replay (one SWITCH node: CUDA 12.8+). Branches return nothing (they
    write into arrays); so does ``switch``.
    """
    chosen_from = _check_branches(branches)
    _check_index(index)
    stream = capturing_stream()
    with _in_body():
        if stream is None:
            if on_gpu(index):
                warm_kernels()
            chosen = _host_index(index, len(chosen_from))
            if chosen is not None:
                with _as_recorded("switch"):
                    chosen_from[chosen]()
            return None
        graph_switch(stream, index, chosen_from, user_line())
    return None


def conditional_nodes_unavailable_reason() -> Optional[str]:
    """None when conditional graph nodes can be recorded here; otherwise why not, in words."""
    return conditional_runtime()[1]


def switch_nodes_unavailable_reason() -> Optional[str]:
    """None when SWITCH graph nodes (``switch``) can be recorded here; otherwise why not, in words."""
    cuda, reason = conditional_runtime()
    return reason if cuda is None else cuda.switch_problem


def inside_conditional() -> bool:
    """Whether this thread runs inside a ``while_loop``, ``cond`` or ``switch`` (its condition or a body)."""
    return getattr(_bodies, "depth", 0) > 0


@contextmanager
def _in_body() -> Iterator[None]:
    _bodies.depth = getattr(_bodies, "depth", 0) + 1
    try:
        yield
    finally:
        _bodies.depth -= 1


# -- host semantics --------------------------------------------------------------------------------


def _check_max_iters(max_iters: Optional[int]) -> int:
    if max_iters is None:
        return -1
    if isinstance(max_iters, bool) or not isinstance(max_iters, (int, np.integer)):
        raise TypeError(f"max_iters must be None or a non-negative int, got {type(max_iters).__name__}")
    if max_iters < 0:
        raise ValueError(f"max_iters must be None or a non-negative int, got {max_iters}")
    return int(max_iters)


def _as_recorded(what: str) -> Any:
    """The body's context on the host: under a host capture, what the GPU's recorded body allows."""
    return no_graph_breaks(what) if capture_run_active() else nullcontext()


def _host_truth(value: Any, what: str) -> bool:
    if isinstance(value, (bool, int, float, np.bool_, np.number)):
        if capture_run_active():  # the GPU refuses a host condition under capture: so does its reference
            raise host_value_refused(value, what)
        return bool(value)
    size = getattr(value, "size", None)
    if size is None or not hasattr(value, "item"):
        raise TypeError(f"{what} must be a one-element array or a scalar, got {describe(value)}")
    if size != 1:
        raise ValueError(f"{what} must hold exactly one element, got {describe(value)}")
    # A device-to-host read for CuPy arrays (the eager cost). Under a host capture it stands for
    # the conditional node's read on the device, which the host backend must not refuse.
    with reads_allowed():
        return bool(value.item())


def _check_branches(branches: Any) -> tuple[Callable[[], Any], ...]:
    if not isinstance(branches, Sequence) or isinstance(branches, str):
        raise TypeError(f"switch needs branches as a list or tuple of callables, got {type(branches).__name__}")
    if not branches:
        raise ValueError("switch needs at least one branch: branches is empty")
    for i, fn in enumerate(branches):
        if not callable(fn):
            raise TypeError(f"switch needs callable branches: branches[{i}] is {type(fn).__name__}")
    return tuple(branches)


def _check_index(index: Any) -> None:
    """A TypeError or ValueError naming ``index`` unless it is a one-element integer array or an integer."""
    if isinstance(index, (bool, np.bool_)):
        raise TypeError(f"switch's index must be an integer, got {type(index).__name__}")
    if isinstance(index, (int, np.integer)):
        return
    dtype, size = getattr(index, "dtype", None), getattr(index, "size", None)
    if dtype is None or size is None or not hasattr(index, "item"):
        raise TypeError(f"switch's index must be a one-element integer array, got {describe(index)}")
    if getattr(dtype, "kind", None) not in ("i", "u"):
        raise TypeError(f"switch's index must be a one-element integer array, got {describe(index)}; "
                        "cast it, e.g. index.astype('int32')")
    if size != 1:
        raise ValueError(f"switch's index must hold exactly one element, got {describe(index)}")


def _host_index(index: Any, count: int) -> Optional[int]:
    """The branch ``index`` selects, or None when it is out of range (negative included)."""
    if isinstance(index, (int, np.integer)):
        if capture_run_active():  # the GPU refuses a host index under capture: so does its reference
            raise host_value_refused(index, "switch's index")
        value = int(index)
    else:
        with reads_allowed():  # as in _host_truth: stands for the SWITCH node's read on the device
            value = int(index.item())
    return value if 0 <= value < count else None


def _count_like(flag: Any, count: int) -> Any:
    if on_gpu(flag):
        import cupy

        return cupy.full((), count, dtype=cupy.int32)
    return np.array(count, dtype=np.int32)


def _host_while(cond_fn: Callable[[], Any], body_fn: Callable[[], Any], limit: int) -> Any:
    count = 0
    flag = cond_fn()
    if on_gpu(flag):
        warm_kernels()
    while _host_truth(flag, "while_loop's cond_fn()") and (limit < 0 or count < limit):
        with _as_recorded("while_loop"):
            body_fn()
        count += 1
        flag = cond_fn()
    return _count_like(flag, count)
