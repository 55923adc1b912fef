"""The ways an entry replays; ``CUDAGraphEntry.choose_strategy`` picks one per entry.

* ``run_copied``: copy the arguments into the static buffers, launch, return the outputs;
* ``run_and_write_back``: the same, then the rows the function wrote copied back to the caller;
* ``run_bound`` / ``run_bound_plain``: zero-copy, the graph re-pointed at the caller's arrays
  (``backends/zerocopy/binding.py``); the plain one for the common case (one bound output, nothing written
  back). The compiled replay serves the steady calls of both (``backends/fastpath/record.py``);
* ``checks.writes.run_checking_writes``: the first replay of an entry captured without warm-ups, which
  finds out whether the function writes into its arguments and then chooses again.

``WriteBack`` is what the write-back strategies do after a launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol

from ..pytree import unflatten
from .padding import InputArena


class WriteBack:
    """What a function that writes into its copied arguments did, done to the caller's arrays.

    Under a graph the function writes into the static copies; the eager call would have changed
    the caller's arrays. After each launch the rows it wrote are copied back, and the padding it
    may have written is marked for rewriting. Behind a relay the writes land in the relay's internal
    copy (``landings``), never in the static buffer nor a bound caller's array: copied back from there.
    """

    __slots__ = ("arena", "batched", "count", "whole")

    def __init__(self, arena: Any, static_inputs: Sequence[Any], whole_inputs: Sequence[Any],
                 written: Sequence[int], landings: Sequence[Any] = ()):
        count = self.count = len(static_inputs)
        self.arena = arena
        landed = list(landings) + [None] * (count + len(whole_inputs) - len(landings))
        # (index, where the writes land, whether they land there even when the argument was bound)
        self.batched = [(k, static_inputs[k] if landed[k] is None else landed[k], landed[k] is not None)
                        for k in written if k < count]
        self.whole = [(k - count, whole_inputs[k - count] if landed[k] is None else landed[k], landed[k] is not None)
                      for k in written if k >= count]

    def __call__(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any], copied: int = -1) -> None:
        """``copied``: a bit per buffer (batched, then whole) that held the call's data; a bound
        argument was written in place by the graph itself (unless behind a relay)."""
        for k, buf, relayed in self.batched:
            if relayed or copied >> k & 1:
                inputs[k][...] = buf[:rows]
        count = self.count
        for k, buf, relayed in self.whole:
            if relayed or copied >> (count + k) & 1:
                whole[k][...] = buf
        self.arena.state = None


class Replayable(Protocol):
    """What a strategy uses of an entry (``CUDAGraphEntry`` is one)."""

    name: str
    padded: int
    backend: Any
    labels: list[str]
    written: tuple[int, ...]
    static_inputs: list[Any]
    whole_inputs: list[Any]
    landings: list[Any]
    binding: Any
    write_back: Optional[WriteBack]
    arena: InputArena
    copy_rows: Any
    single_output: bool
    leaves: list[Any]
    returned: tuple[str, ...]
    spec: Any
    check_writes: bool

    @property
    def checks_overlaps(self) -> bool: ...

    def load_inputs(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any: ...
    def launch(self) -> None: ...
    def outputs(self, rows: int, stream: Any = None) -> Any: ...
    def check_not_aliased(self, inputs: Sequence[Any], whole: Sequence[Any], written: Sequence[int]) -> None: ...
    def choose_strategy(self, written: Sequence[int] = ()) -> None: ...


def run_copied(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """Copy in, launch, outputs."""
    stream = entry.load_inputs(inputs, rows, whole)
    entry.launch()
    return entry.outputs(rows, stream)


def run_and_write_back(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """``run_copied`` for a function that writes into its copied arguments or its constants (found at capture)."""
    entry.check_not_aliased(inputs, whole, entry.written)
    stream = entry.load_inputs(inputs, rows, whole)
    entry.launch()
    if entry.write_back is not None:
        entry.write_back(inputs, rows, whole)
    return entry.outputs(rows, stream)


def run_copied_or_back(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any]) -> Any:
    return (run_and_write_back if entry.checks_overlaps else run_copied)(entry, inputs, rows, whole)


def run_bound_plain(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """``run_bound`` for the common case, its checks decided once: one output, bound, no overlap to check
    (nothing written into an argument or a constant), and nothing written back or finished after the launch."""
    if rows != entry.padded:
        return run_bound(entry, inputs, rows, whole)
    copied, fresh = entry.binding.bind(inputs, whole, entry.copy_rows, entry.backend.order_after_last_use())
    if copied:
        entry.arena.state = (id(entry), rows)
    entry.launch()
    return fresh[0]


def run_bound(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """Zero-copy: arguments and outputs bound to the caller's arrays where allowed."""
    binder = entry.binding
    if rows != entry.padded:  # the graph reads the padded static buffers: copy as ever
        if binder.off_static_buffers:
            binder.point_at_static_buffers()
        return run_copied_or_back(entry, inputs, rows, whole)  # (checks overlaps itself when it writes back)
    if entry.checks_overlaps:  # a copied argument could hide a write into another argument or a constant
        entry.check_not_aliased(inputs, whole, entry.written)
    stream = entry.backend.order_after_last_use()
    copied, fresh = binder.bind(inputs, whole, entry.copy_rows, stream)
    if copied:
        entry.arena.state = (id(entry), rows)
    entry.launch()
    if entry.write_back is not None:
        entry.write_back(inputs, rows, whole, copied)
    if binder.needs_finish:
        binder.finish(fresh)
    if fresh is None:
        return entry.outputs(rows, stream)
    if entry.single_output:
        return fresh[0]
    bound = dict(zip(binder.output_positions, fresh))
    copy_out = entry.backend.copy_out
    result = [bound[i] if i in bound else leaf if how == "as it is" else copy_out(leaf, stream) if how == "a copy"
              else leaf[()] for i, (leaf, how) in enumerate(zip(entry.leaves, entry.returned))]
    return unflatten(entry.spec, result)
