"""Whether a function writes into the static copies of its arguments: bytes compared before and after.

A function that writes into its copied arguments would, under a graph, change the static copy
while the caller's array keeps its values; the entry then copies the written rows back
(``strategies.WriteBack``). The writes show at capture when warm-ups ran (``recording.record``
compares the buffers with ``changed``), else only on the first replay (``run_checking_writes``, the
strategy an entry captured without warm-ups starts with).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...logs import logger
from ..strategies import Replayable


def same_bytes(xp: Any, a: Any, b: Any) -> bool:
    """Bit-for-bit equality (NaNs included) of two arrays of one shape and dtype."""
    return bool(xp.array_equal(a.reshape(-1).view(xp.uint8), b.reshape(-1).view(xp.uint8)))


def changed(xp: Any, buffers: Sequence[Any], snapshots: Sequence[Any]) -> list[int]:
    """Positions of the ``buffers`` whose bytes differ from their ``snapshots``."""
    return [k for k, (buf, before) in enumerate(zip(buffers, snapshots)) if not same_bytes(xp, buf, before)]


def run_checking_writes(entry: Replayable, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    """The first replay of an entry captured without warm-ups (a CUDA stream capture executes
    nothing; the host backend undoes its capture run to match) or by ``warmup()`` (its fill hides
    writes that keep it): only now can writes into the static inputs show. They are copied before the
    launch and compared after it with where the writes land (the buffer, or a relay's internal copy);
    if the function wrote into them, the write-back is chosen from now on and applied to this call. A
    write that leaves a value as it was cannot be seen by comparing bytes. A replay that raises keeps
    the check."""
    backend = entry.backend
    # Writes not known yet: any argument may be written, so any overlap could hide one.
    entry.check_not_aliased(inputs, whole, range(len(inputs) + len(whole)))
    if entry.binding is not None and entry.binding.off_static_buffers:
        entry.binding.point_at_static_buffers()
    stream = entry.load_inputs(inputs, rows, whole)
    buffers = entry.static_inputs + entry.whole_inputs
    snapshots = [backend.copy_out(buf, stream) for buf in buffers]
    entry.launch()
    # Behind a relay the function reads and writes the relay's internal copy, not the static buffer.
    landed = [buf if landing is None else landing for buf, landing in zip(buffers, entry.landings)]
    written = changed(backend.xp, landed, snapshots)
    del snapshots, landed
    entry.check_writes = False
    if any(entry.landings[k] is not None for k in written):
        # Its relayed warm-ups ran on warmup()'s fill and could not show the write: the family relays no
        # more, and this entry copies its arguments in and writes back from the relay's copies.
        backend.relays.give_up()
    entry.choose_strategy(written)
    if written:
        logger.info(
            "%s() wrote into its argument(s) %s on its first replay (no warm-up ran at capture to show it): "
            "each replay now copies them back into the caller's arrays, as the eager call would have changed "
            "them", entry.name, [entry.labels[k] for k in written],
        )
        entry.write_back(inputs, rows, whole)  # type: ignore[misc]  # this call copied every argument in
    return entry.outputs(rows, stream)
