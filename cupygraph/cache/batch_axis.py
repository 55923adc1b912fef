"""Which outputs of a graph carry the batch on their leading axis: shown by an eager run at the real batch.

A graph runs on the padded batch, and a padded call returns its outputs cut back to the real rows
on axis 0. That is right only for an output whose leading axis is the batch. ``x.T``,
``np.concatenate([x, x])`` and ``x.reshape(-1)`` carry the batch elsewhere, and an unbatched output
whose length happens to equal the padded size (``x.sum(axis=0)`` with as many columns) must not be
cut at all. The padded shapes alone cannot tell these apart; two runs at different batch sizes can.
So the first padded call of a key runs the function as it is, at its real batch (its result is the
call's: ``cache/first_call.py``), and each output is compared with the graph's:

* the same shape in both: not batched, never cut;
* ``(rows, *tail)`` eagerly and ``(padded, *tail)`` in the graph: batched on axis 0, cut;
* any other shape: the padded calls of the key run eagerly (``batch_axis_not_leading``), the detail
  naming the output, its shapes and what to do;
* another structure, dtype or plain value (``x.shape[0]``, a Python counter): the graph would return
  what its capture saw, so the key runs eagerly (``replay_mismatch``), as a host replay that
  differs does.

``out_batched``, when declared, must agree with what the shapes show (``InputMismatchError``
otherwise: the declaration is wrong).

Values are not compared: padding rows take part in whatever mixes rows (``x - x.mean(axis=0)``, a
sum over the batch), which ``pad_value`` controls (a documented footgun), and no comparison between
runs of different row counts could tell a padding effect from rounding without a tolerance (a
GEMM's rounding depends on its row count). A call of exactly the padded size is checked the same
way against the capture: any difference there means the graph would return what the capture saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ..errors import InputMismatchError
from ..pytree import expand_out_batched, flatten, same_value
from ..reasons import FallbackReason
from .entry import CUDAGraphEntry

__all__ = ["check_padded_call", "difference_at_capture_size"]


def _compare(eager: Any, captured: Any, rows: int, padded: int, is_array: Callable[[Any], bool],
             name: str) -> tuple[list[bool], Optional[str], Optional[str]]:
    """(per output leaf, whether it is batched on axis 0; an output whose batch axis is not leading; any
    other difference (structure, dtype, a plain value): the first found of each, or None)."""
    def array_like(value: Any) -> bool:
        return is_array(value) or isinstance(value, np.generic)  # a NumPy scalar is a 0-d array here

    ran, ran_spec = flatten(eager, array_like)
    held, held_spec = flatten(captured, is_array)
    if ran_spec != held_spec or len(ran) != len(held):
        return [], None, (f"{name}() returned another output structure at {rows} rows ({len(ran)} outputs) than "
                          f"in its graph for {padded} rows ({len(held)} outputs)")
    flags: list[bool] = []
    for i, (now, graph) in enumerate(zip(ran, held)):
        if not is_array(graph):
            if array_like(now) or not same_value(graph, now):
                return flags, None, f"output {i} of {name}() is {now!r:.60} at {rows} rows, {graph!r:.60} in the graph"
            flags.append(False)
            continue
        if not array_like(now) or now.dtype != graph.dtype:
            what = f"{now.dtype}" if array_like(now) else type(now).__name__
            return flags, None, f"output {i} of {name}() is {what} at {rows} rows but {graph.dtype} in its graph"
        shape, held_shape = tuple(now.shape), tuple(graph.shape)
        if shape == held_shape:
            flags.append(False)
        elif shape[:1] == (rows,) and held_shape[:1] == (padded,) and shape[1:] == held_shape[1:]:
            flags.append(True)
        else:
            return flags, (f"output {i} of {name}() has shape {list(shape)} at the real batch of {rows} rows but "
                           f"{list(held_shape)} in its graph for {padded} rows: its batch axis is not the leading "
                           "one, so the padding rows cannot be cut off"), None
    return flags, None, None


def check_padded_call(entry: CUDAGraphEntry, eager: Any, rows: int, out_batched: Any, is_array: Callable[[Any], bool],
                      name: str) -> tuple[Optional[str], Optional[str]]:
    """After the eager run of a call of ``rows`` < ``entry.padded`` rows: mark which outputs padded calls
    cut (``entry.batched_outputs``). Returns (why padded calls must run eagerly, kept in
    ``entry.padded_refusal``; how the graph differs otherwise, which no call may replay), each or None.
    ``InputMismatchError`` when a declared ``out_batched`` contradicts the shapes."""
    captured = entry.recording.outputs
    flags, problem, other = _compare(eager, captured, rows, entry.padded, is_array, name)
    if other is not None:
        return None, f"{other}; a graph would return what its capture saw"
    if problem is None and out_batched is not None:
        declared = expand_out_batched(out_batched, captured, len(flags))
        for i, (flag, shown) in enumerate(zip(declared, flags)):
            if bool(flag) != shown:
                raise InputMismatchError(
                    f"output {i} of {name}() is declared {'batched' if flag else 'unbatched'} in out_batched, but its "
                    f"shape {'does not change' if flag else 'changes'} with the batch (eager run of {rows} rows, graph "
                    f"of {entry.padded}): declare it {'unbatched' if flag else 'batched'}, or leave out_batched out "
                    "(the first padded call shows which outputs carry the batch)")
    entry.padding_checked = True
    if problem is not None:
        entry.padded_refusal = (
            f"{FallbackReason.BATCH_NOT_LEADING.text}: {problem}; put the batch on the leading axis of every "
            f"output (transpose or reshape after the call), or call with batches of exactly a capture size "
            f"({entry.padded} rows for this graph)")
        return entry.padded_refusal, None
    entry.batched_outputs = tuple(flags)
    return None, None


def difference_at_capture_size(entry: CUDAGraphEntry, eager: Any, is_array: Callable[[Any], bool],
                               name: str) -> Optional[str]:
    """How the eager run of a call of exactly ``entry.padded`` rows differs from the capture (another
    structure, shape, dtype or plain value: a graph would return what the capture saw), or None."""
    _, shape, other = _compare(eager, entry.recording.outputs, entry.padded, entry.padded, is_array, name)
    problem = shape or other
    return None if problem is None else f"{problem}; a graph would return what its capture saw"
