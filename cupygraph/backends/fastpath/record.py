"""The compiled replay of a zero-copy graph: the common call in C, every other in Python.

Measured on H100s (2026-11-26, ``tools/bench.py --workloads zero-copy``): a one-kernel ``jit`` call
that binds its argument and takes its output from the ring cost 2.7 to 5.5 µs of host time above a
bare ``graph.launch()``, depending on the host's speed, all of it Python: finding the shortcut, the
family lock, the binder's loop, the bank check, the counters. ``_replay.c`` does the same steps for
the calls that dominate steady traffic, and hands every other call back untouched.

What it reads is one ``Record`` per shortcut (one call signature), built here and never changed (the
JAX ``fastpath_data`` model):

* per call position, what the argument must be: an array of an exact type, shape, strides and dtype
  (batched or not: one to eight), the very object of the current constant set, or a static value of
  that type and value (the shortcut's key);
* per leaf of the result: an array of its ring (outputs up to 64 MiB), a fresh array (larger ones), or
  the object returned as it is (``output_mode="view"``), and how the leaves make the result;
* each bank's one executable with the address each slot a call gives holds (arguments, then bound
  outputs), and a launch to fall back on: only the banks whose constants' slots hold the constants'
  addresses, where no argument slot holds the family's own memory (the Python path copies such an
  argument) and no array the function writes into overlaps another argument (a call at any other
  bank's addresses is handed back: the Python path rebinds, or raises ``AliasedWrite`` and runs it
  eagerly);
* the stream of the last replay and the family's generation.

A call is served when every position matches, it comes on that stream, each ringed output has a free
array, and some bank holds exactly these addresses: then, under the family lock, the bank is launched
(``cuGraphLaunch`` on the caller's stream, the GIL released as ``Graph.launch`` releases it) and the
entry's ``ReplayCounts`` updated (launches, binds, use clock, last bank, hits at these rows).
Anything else, and any record whose generation is no longer the family's, it hands back before
changing anything.

Python keeps records true by bumping the family's generation (``FamilyState.bump``) whenever what a
record describes may change: a bank re-pointed, a ring changed, the stream changed, an entry
released, constants rebound, an entry's strategy changed; and by making a new record after a steady
call (``Shortcuts.compile``). Where no C compiler was found at install (``compiled.py``), every
call takes the Python path (same results, more host time).
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ...pytree import LEAF, unflatten
from ..driver import graph_launch_address
from .compiled import COMPILED, MAX_ARGUMENTS, MAX_BANKS, MAX_POSITIONS, MAX_SLOTS, Record
from .compiled import references as _compiled_references

__all__ = ["COMPILED", "graph_launch_address", "record_of", "references"]


def _python_references(item: list[Any]) -> tuple[int, int, int, int]:
    array = item[0]
    data = array.data
    return sys.getrefcount(array), sys.getrefcount(data), sys.getrefcount(data.mem), weakref.getweakrefcount(array)


references: Callable[[list[Any]], tuple[int, int, int, int]] = (
    _compiled_references if _compiled_references is not None else _python_references)
"""How many references the array of a ring ``item`` ([array, stream, counts]), its memory pointer and
its memory have, and weak ones. Measured the same way when the ring alone holds the array and
before it is taken again: equal counts mean the caller (and every view, pointer or weak reference)
let go of it. One implementation per process (C or Python): their counts differ by their own
temporaries, so a ring is only ever measured by one of them."""


def _contiguous_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


def _structure(spec: Any) -> Any:
    """How the record makes the result of its leaves: None (one leaf), ``tuple`` or ``list`` (a flat one,
    built in C), else the pytree's rebuild."""
    if spec is LEAF:
        return None
    if spec[0] == "seq" and spec[1] in (tuple, list) and all(child is LEAF for child in spec[2]):
        return spec[1]
    return functools.partial(unflatten, spec)


def _may_serve(held: Sequence[int], fixed: tuple[tuple[int, int], ...], written: tuple[int, ...],
               spans: tuple[int, ...], family_memory: Sequence[bool] = ()) -> bool:
    """Whether a bank holding the addresses ``held`` may serve the record's calls. A call is served only at
    a bank's own addresses, so what depends on them alone is decided once here, not per call: each
    constant's slot holds that constant's address, no argument slot holds the family's own memory
    (``family_memory``, per argument: the Python path copies such an argument, ``CupyBinder.bind``), and no
    array the function writes into shares bytes with another argument (the Python path then raises
    ``AliasedWrite`` and runs the call eagerly). Bytes are half-open spans from each array's address; an
    array of 0 bytes overlaps nothing."""
    if any(held[slot] != address for slot, address in fixed) or any(family_memory):
        return False
    for i in written:
        for j, span in enumerate(spans):
            if j != i and spans[i] and span and held[i] < held[j] + span and held[j] < held[i] + spans[i]:
                return False
    return True


def record_of(shortcut: Any, entry: Any, recording: Any, arguments: tuple[Any, ...], inputs: Sequence[Any],
              outputs: tuple[Any, ...], fixed: tuple[tuple[int, int], ...], lock: Any) -> Optional[Any]:
    """The compiled replay's record of ``shortcut``'s calls through ``recording``'s banks, or None where it
    could not serve them. ``arguments``: per call position, an array index or what the value must be
    (``Shortcuts.signature``); ``inputs``: the bound argument slots, one per array index; ``outputs``: per
    result leaf, ``("ring", slot, ring)``, ``("fresh", slot, shape, dtype)`` or ``("as_is", leaf)``;
    ``fixed``: (slot, address) of the constants. A bank's slots are the binder's: arguments, bound outputs,
    then constants; the record compares the ones a call gives and keeps only the banks ``_may_serve``.
    Built under the family lock, right after a call that bound these slots."""
    count = len(inputs)
    backend = entry.backend
    stream = backend.last_stream_ptr()
    compared = count + sum(1 for output in outputs if output[0] != "as_is")
    if (Record is None or not 1 <= count <= MAX_ARGUMENTS or len(arguments) > MAX_POSITIONS
            or compared > MAX_SLOTS or not recording.single or stream is None):
        return None
    shapes = tuple(tuple(slot.shape_dtype[0]) for slot in inputs)
    dtypes = tuple(slot.shape_dtype[1] for slot in inputs)
    strides = tuple(_contiguous_strides(shape, dtype.itemsize) for shape, dtype in zip(shapes, dtypes))
    spans = tuple(math.prod(shape) * dtype.itemsize for shape, dtype in zip(shapes, dtypes))
    written = tuple(entry.written)
    owns = backend.owns
    banks = tuple((bank.index, recording.handle(bank), tuple(int(a) for a in bank.current[:compared]), bank.launch)
                  for bank in recording.banks[:MAX_BANKS] if _may_serve(
                      bank.current, fixed, written, spans,
                      [a != slot.static_address and owns(a) for a, slot in zip(bank.current, inputs)]))
    if not banks:
        return None
    family = backend.family
    return Record(
        array_type=cupy.ndarray, arguments=arguments, shapes=shapes, strides=strides, dtypes=dtypes, outputs=outputs,
        structure=_structure(entry.spec), allocate=cupy.ndarray, device=backend.device_id if backend.per_device else -1,
        stream=int(stream), banks=banks, rows=int(shortcut.rows), counts=entry.counts, family=family,
        generation=family.generation, lock=lock, current_stream=cupy.cuda.get_current_stream,
        graph_launch=graph_launch_address())
