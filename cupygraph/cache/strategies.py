"""The ways an entry replays; ``CUDAGraphEntry.choose_strategy`` picks one per entry.

* ``run_copied``: copy the arguments into the static buffers, launch, return the outputs;
* ``run_and_write_back``: the same, then the rows the function wrote copied back to the caller;
* ``run_bound`` / ``run_bound_plain``: zero-copy, the graph re-pointed at the caller's arrays
  (``backends/zerocopy/binding.py``); the plain one for the common case (one bound output, nothing written
  back), which the compiled replay serves too;
* ``run_checking_writes``: the first replay of an entry captured without warm-ups, which finds out
  whether the function writes into its arguments and then chooses again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol

from ..logs import logger
from ..pytree import unflatten
from .buffers import WriteBack, changed
from .padding import InputArena


class Replayable(Protocol):
    """What a strategy uses of an entry (``CUDAGraphEntry`` is one)."""

    name: str
    padded: int
    backend: Any
    labels: list[str]
    written: tuple[int, ...]
    static_inputs: list[Any]
    whole_inputs: list[Any]
    binding: Any
    write_back: Optional[WriteBack]
    arena: InputArena
    copy_rows: Any
    single_output: bool
    leaves: list[Any]
    returned: tuple[str, ...]
    spec: Any
    check_writes: bool

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
    """``run_copied`` for a function that writes into its copied arguments (found at capture)."""
    entry.check_not_aliased(inputs, whole, entry.written)
    stream = entry.load_inputs(inputs, rows, whole)
    entry.launch()
    entry.write_back(inputs, rows, whole)  # type: ignore[misc]
    return entry.outputs(rows, stream)


def run_copied_or_back(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any]) -> Any:
    return (run_and_write_back if entry.write_back is not None else run_copied)(entry, inputs, rows, whole)


def run_bound_plain(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """``run_bound`` for the common case, its checks decided once: one output, bound, and nothing
    written back or finished after the launch."""
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
    if entry.write_back is not None:
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


def run_checking_writes(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """The first replay of an entry captured without warm-ups: a CUDA stream capture executes
    nothing (the host backend undoes its capture run to match), so only now can writes into the
    static inputs show. They are copied before the launch and compared after it; if the function
    wrote into them, the write-back is chosen from now on and applied to this call. A write that
    leaves a value as it was cannot be seen by comparing bytes. A replay that raises keeps the check."""
    backend = entry.backend
    # Writes not known yet: any argument may be written, so any overlap could hide one.
    entry.check_not_aliased(inputs, whole, range(len(inputs) + len(whole)))
    if entry.binding is not None and entry.binding.off_static_buffers:
        entry.binding.point_at_static_buffers()
    stream = entry.load_inputs(inputs, rows, whole)
    buffers = entry.static_inputs + entry.whole_inputs
    snapshots = [backend.copy_out(buf, stream) for buf in buffers]
    entry.launch()
    written = changed(backend.xp, buffers, snapshots)
    del snapshots
    entry.check_writes = False
    entry.choose_strategy(written)
    if written:
        logger.info(
            "%s() wrote into its argument(s) %s on its first replay (no warm-up ran at capture to show it): "
            "each replay now copies them back into the caller's arrays, as the eager call would have changed "
            "them", entry.name, [entry.labels[k] for k in written],
        )
        entry.write_back(inputs, rows, whole)  # type: ignore[misc]  # this call copied every argument in
    return entry.outputs(rows, stream)
