"""The compiled replay of a zero-copy graph: the common call in C, every other in Python.

Measured on H100s (2026-11-26, ``tools/bench.py --workloads zero-copy``): a one-kernel ``jit`` call
that binds its argument and takes its output from the ring cost 2.7 to 5.5 µs of host time above a
bare ``graph.launch()``, depending on the host's speed, all of it Python: finding the plan, the
family lock, the binder's loop, the bank check, the counters. ``_replay.c`` does the same steps for
the one case that dominates steady traffic, and hands every other call back untouched.

What a ``Replayer`` serves: calls of one plan (one to eight array arguments, all batched, of the
captured shapes and dtypes, no keywords, constants or other arguments) whose entry runs
``_run_bound_plain`` (every input bound, one bound output, nothing written back), on the stream of
the last replay, where the arguments are C-contiguous at the addresses some bank of the graph already
holds and an array of the output's ring is free again on that
stream. It then does what the Python path does, on the same objects (one state for both): under
the family lock, check that the plan still points at its live entry with the same constants, take
the ring's array, switch banks if the other one holds the addresses, mark the bank launched,
launch (the bank's one executable with ``cuGraphLaunch`` on the caller's stream, the GIL released as
``Graph.launch`` releases it; else, or where the driver refuses, through the bank's own launch),
count the replay, the use tick and the plan's hit. Anything else, it returns None before
changing anything and ``GraphedFunction._call`` goes on as without it. Where several GPUs are
visible the Python path first routes a call to the family of its array's device; the compiled
replay checks each argument's device too, where several GPUs are visible (an address alone does not
say: memory freed on one device may come back on another).

``GraphedFunction`` derives from the compiled ``FastFunction``, whose call offers the arguments to
the replayer its ``PlanCache`` published (no Python frame at all when it serves them) before
``GraphedFunction._call``. Where no C compiler was found at install (``compiled.py``), every call
takes the Python path (same results, more host time). The extension reads the objects' attributes by name: the
names it uses are listed in ``_replay_helpers.c`` (``replay_intern_names``); renaming one of them hands every
call back to Python, which ``tests/gpu/test_fast_replay.py`` would show.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from .compiled import COMPILED, MAX_ARGUMENTS, Replayer
from .compiled import references as _compiled_references
from .driver import graph_launch_address

__all__ = ["COMPILED", "graph_launch_address", "references", "replayer"]


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


def replayer(plan: Any, entry: Any, binder: Any, arguments: Sequence[Any], output: Any, lock: Any,
             use_tick: Callable[[], int]) -> Optional[Any]:
    """The compiled replay of ``plan``'s calls through ``binder`` (its bound ``arguments`` slots, one
    per argument in order, and one ringed ``output`` slot), or None where it could not serve them."""
    count = len(arguments)
    if (Replayer is None or not 1 <= count <= MAX_ARGUMENTS or plan.batched != tuple(range(count))
            or plan.whole or binder.recording is None):
        return None
    return Replayer(
        array_type=cupy.ndarray, shapes=tuple(tuple(slot.shape_dtype[0]) for slot in arguments),
        dtypes=tuple(slot.shape_dtype[1] for slot in arguments), plan=plan, entry=entry,
        token=entry.constants_token, run=entry.run, binder=binder, slot=output,
        recording=binder.recording, backend=entry.backend, lock=lock,
        current_stream=cupy.cuda.get_current_stream, use_tick=use_tick, graph_launch=graph_launch_address(),
        device=entry.backend.device_id if entry.backend.per_device else -1)
