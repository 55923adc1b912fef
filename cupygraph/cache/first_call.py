"""The call that captures a key runs the function as it is; the graph serves the key's later calls.

A capture runs the function more than once: its warm-ups (``num_warmups``) on the static buffers,
and the capture run (a CUDA stream capture executes no kernel; the host backend undoes what its
capture run wrote). Were the call's result its first replay's, as before, the call would execute
the function once more, and every effect outside the static buffers would happen once per run: a
write into a ``constant_argnums`` array or a closure array (``w += 1``) twice, draws from a global
generator twice; and a padded batch would be cut by a rule no run had checked. So the call that
captures its key, in one place (this module, asked by ``jit``):

1. runs the function as it is on the caller's own arrays, as without ``jit``: its result, its
   writes and its draws are the call's. An exception there is the function's own: it propagates
   as it is and nothing is captured (the next call tries again, as a plain call would fail again);
2. captures. Where step 1 changed an array the function reads by address (an array argument that
   is not copied in, i.e. a constant, or a closure or global array that ``backends/guards/foreign.py``
   finds), the capture runs no warm-up, so nothing writes there again; the fingerprints that tell
   it are a copy on the host and a hash on the GPU (``Backend.fingerprint``), so large weights are
   never copied on the device. Legacy global generators are refused in the warm-ups before they
   draw (``backends/guards/host_escapes.py``, ``backends/guards/cupy_legacy_random.py``). A capture that fails
   leaves step 1's result the call's: the function does not run a third time;
3. compares step 1's outputs with the graph's (``cache/batch_axis.py``): for a padded batch, which
   outputs carry the batch on axis 0 (the padded calls of the key run eagerly where one does not);
   for a batch of exactly the capture size, that the graph returns the same structure, shapes and
   plain values (else the key runs eagerly, ``replay_mismatch``). It returns step 1's result; no
   replay runs: the graph's first replay is the key's next call.

A padded call of a key captured otherwise (by a call of exactly its size, or ``warmup()``) runs
the function eagerly once for the same comparison (``check_padded_call``), its result the call's.
The price is an eager run per captured key (the replay it replaces cost next to nothing) and, where
arrays are read by address, two fingerprints of each.

Why this design, and not another (issue 27):

* restoring what the warm-ups wrote needs a copy, taken before them, of every array the function
  reads by address: the weights or a KV cache, their size again in memory (device, or host plus a
  transfer both ways) at every capture;
* returning the first warm-up's result instead of a replay's still repeats the writes for
  ``num_warmups > 1``, cannot show the outputs' shapes at the real batch (a warm-up runs padded),
  and would need the copied arguments written back from the static copies before the next warm-up;
* refusing to graph a key whose function writes outside its copies would refuse the decode step
  that writes into its KV cache, which graphs well (each replay writes once).

Running the call as it is needs no copy, shows the real shapes, and costs one eager run per key;
the warm-ups it skips after a write only make capture riskier for that key (a first-time setup
during the capture fails it with a clear reason: the key runs eagerly).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

from ..backends.base import Backend, ReplayMismatch
from ..backends.guards.foreign import describe_array, find_arrays
from ..logs import logger
from ..reasons import FallbackReason
from .batch_axis import check_padded_call, difference_at_capture_size
from .entry import CUDAGraphEntry
from .failures import Eager, count_eager_run, worked_at_real_batch
from .key import GraphKey
from .recording import CaptureRequest
from .stats import CUDAGraphStats

__all__ = ["FirstCall", "capture_after_running", "padded_call"]


class FirstCall:
    """A call of ``rows`` rows of ``key`` that ran the function as it is for its ``result``; ``verdict``:
    what serves the key from now on (its entry, or the front door's shortcut to it), or why the key (or
    its padded calls) runs eagerly."""

    __slots__ = ("key", "result", "rows", "verdict")

    def __init__(self, key: GraphKey, result: Any, verdict: Any, rows: int):
        self.key, self.result, self.verdict, self.rows = key, result, verdict, rows

    def count(self, stats: CUDAGraphStats, store: Any, name: str) -> Any:
        """Count the call (a fallback with its reason, or a miss and a use of its key); what serves the
        key's next calls, if anything does. Under raise mode a key whose capture raised is a
        ``CaptureError`` (the function, having run as it is, is not run again)."""
        verdict = self.verdict
        if isinstance(verdict, Eager):
            count_eager_run(verdict, name=name, stats=stats, raises=store.raises)
            return None
        stats.record_eager_miss()
        store.count_sighting(self.key)  # a use of the key (``get_hot_shapes``), not a replay
        return verdict


def _watched(request: CaptureRequest, backend: Backend) -> list[tuple[Optional[int], str, Any]]:
    """(argument position, or None; what; array) for every array the call can write: its array arguments,
    and the arrays its closure and globals hold."""
    arrays: list[tuple[Optional[int], str, Any]] = [
        (i, f"argument {i}", a) for i, a in enumerate(request.args) if backend.is_array(a)]
    arrays += [(None, found.name, found.array) for found in find_arrays(request.fn, backend.is_array)]
    unique: dict[int, tuple[Optional[int], str, Any]] = {}
    for position, what, array in arrays:
        unique.setdefault(id(array), (position, what, array))
    return list(unique.values())


def capture_after_running(store: Any, key: GraphKey, request: CaptureRequest, rows: int, name: str) -> FirstCall:
    """Run ``request``'s call as it is, then capture ``key`` into ``store`` (the ``GraphStore``; steps 1 to 3
    above); ``rows``: the real batch. Called under the family lock, as every capture is."""
    registry = store
    backend = store.backend
    watched = _watched(request, backend)
    before = [backend.fingerprint(array) for _, _, array in watched]
    with registry.instruments.running_as_it_is(name, key, "first call"):
        result = request.fn(*request.args, **request.kwargs)  # the call itself
    written = [(position, what, array) for (position, what, array), seen in zip(watched, before)
               if backend.fingerprint(array) != seen]
    del before
    copied = {*request.batched, *request.copied}
    # The static copies get the data the call already changed: their warm-up could not show the write.
    request = dataclasses.replace(request, written=tuple(p for p, _, _ in written if p in copied),
                                  writes_constants=any(p is not None and p not in copied for p, _, _ in written))
    outer = [f"{what} ({describe_array(array)})" for position, what, array in written if position not in copied]
    if outer and request.warmups != 0 and registry.config.num_warmups:
        logger.info("%s() wrote into %s, which it reads by address: its capture for %s runs no warm-up, so "
                    "they are written once per call, as without jit", name, ", ".join(outer), key.descriptor)
        request = dataclasses.replace(request, warmups=0)
    captured = registry.capture_or_fail(key, request, name=name)
    if isinstance(captured, Eager):
        worked_at_real_batch(captured, name)  # step 1 ran at the real batch: a padded capture raised on padding
        return FirstCall(key, result, captured, rows)
    why = _compare(registry, captured, result, rows, request.out_batched, name)
    return FirstCall(key, result, why if why is not None else captured, rows)


def padded_call(store: Any, entry: CUDAGraphEntry, request: CaptureRequest, rows: int,
                name: str) -> Union[CUDAGraphEntry, Eager, FirstCall]:
    """A call of ``rows`` rows, fewer than ``entry``'s graph holds: the entry once its outputs' batch axis
    was checked, why the key's padded calls run eagerly, or (the first time) the check's eager run."""
    if entry.padding_checked:
        refusal = entry.padded_refusal
        return entry if refusal is None else Eager(FallbackReason.BATCH_NOT_LEADING, refusal)
    with store.instruments.running_as_it_is(name, entry.key, "first padded call"):
        result = request.fn(*request.args, **request.kwargs)  # the call itself, at its real batch
    why = _compare(store, entry, result, rows, request.out_batched, name)
    return FirstCall(entry.key, result, why if why is not None else entry, rows)


def _compare(registry: Any, entry: CUDAGraphEntry, result: Any, rows: int, out_batched: Any,
             name: str) -> Optional[Eager]:
    """Why the eager ``result`` of a call of ``rows`` rows shows that ``entry`` cannot serve it, or None."""
    is_array = registry.backend.is_array
    if rows != entry.padded:
        refusal, problem = check_padded_call(entry, result, rows, out_batched, is_array, name)
        if refusal is not None:
            return Eager(FallbackReason.BATCH_NOT_LEADING, refusal)
    else:
        problem = difference_at_capture_size(entry, result, is_array, name)
    return None if problem is None else registry.replay_failed(entry, ReplayMismatch(problem), name=name)
