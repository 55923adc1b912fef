"""The compiled replay of a zero-copy graph: the common call in C, every other in Python.

Measured on H100s (2026-11-26, ``tools/bench.py --workloads zero-copy``): a one-kernel ``jit`` call
that binds its argument and takes its output from the ring cost 2.7 to 5.5 µs of host time above a
bare ``graph.launch()``, depending on the host's speed, all of it Python: finding the shortcut, the
family lock, the binder's loop, the bank check, the counters. ``_replay.c`` does the same steps for
the one case that dominates steady traffic, and hands every other call back untouched.

What it reads is one ``Record`` per shortcut (one call signature), built here and never changed (the
JAX ``fastpath_data`` model): the arguments' exact type, shapes, strides and dtypes (one to eight
array arguments, all batched, no keywords, constants or other arguments), the stream of the last
replay, each bank's one executable with the addresses its nodes hold (arguments, then the output)
and a launch to fall back on, the output's ring, and the family's generation. A call is served when
its arrays have that layout, it comes on that stream, an array of the ring is free again, and some
bank holds exactly these addresses: then, under the family lock, the bank is launched
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

import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ..driver import graph_launch_address
from .compiled import COMPILED, MAX_ARGUMENTS, MAX_BANKS, Record
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


def record_of(shortcut: Any, entry: Any, recording: Any, arguments: Sequence[Any], output: Any, lock: Any,
              family: Any) -> Optional[Any]:
    """The compiled replay's record of ``shortcut``'s calls through ``recording``'s banks (``arguments``: the
    bound slots, one per argument in order; ``output``: the one ringed output slot), or None where it
    could not serve them. Built under the family lock, right after a call that bound these slots."""
    count = len(arguments)
    backend = entry.backend
    stream = backend.last_stream_ptr()
    if (Record is None or not 1 <= count <= MAX_ARGUMENTS or shortcut.batched != tuple(range(count))
            or shortcut.whole or not recording.single or not output.ring or stream is None):
        return None
    banks = []
    for bank in recording.banks[:MAX_BANKS]:
        if len(bank.current) != count + 1:
            return None
        banks.append((recording.handle(bank), tuple(int(a) for a in bank.current), bank.launch))
    shapes = tuple(tuple(slot.shape_dtype[0]) for slot in arguments)
    dtypes = tuple(slot.shape_dtype[1] for slot in arguments)
    strides = tuple(_contiguous_strides(shape, dtype.itemsize) for shape, dtype in zip(shapes, dtypes))
    return Record(
        array_type=cupy.ndarray, shapes=shapes, strides=strides, dtypes=dtypes,
        device=backend.device_id if backend.per_device else -1, stream=int(stream), banks=tuple(banks),
        ring=tuple(output.ring), rows=int(shortcut.rows), counts=entry.counts, family=family,
        generation=family.generation, lock=lock, current_stream=cupy.cuda.get_current_stream,
        graph_launch=graph_launch_address())
