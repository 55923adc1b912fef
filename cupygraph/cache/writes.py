"""Arguments a function writes into, when its capture could not show it: found on the first replay.

A function that writes into a copied argument writes, under a graph, into the static copy; the
caller's array keeps its old values unless the entry copies the rows back (``_WriteBack``). The
capture finds such writes by comparing the static buffers before and after the warm-ups (and
``jit``'s call that captures by its own run as it is: ``CaptureRequest.written``), but a capture
without warm-ups executes nothing (a CUDA stream capture only records; the host backend undoes its
capture run to match), so nothing can show there. Such an entry, where nothing showed a write,
checks its first replay instead: the static inputs are copied before the launch and compared after
it; if the function wrote into them, the write-back is installed for this entry and applied to
this call.

A write that leaves a value as it was (``np.maximum(x, 0, out=x)`` on positive data) cannot be
seen by comparing bytes, at capture or here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..logs import logger
from .entry import CUDAGraphEntry, _WriteBack


def same_bytes(xp: Any, a: Any, b: Any) -> bool:
    """Bit-for-bit equality (NaNs included) of two arrays of one shape and dtype."""
    return bool(xp.array_equal(a.reshape(-1).view(xp.uint8), b.reshape(-1).view(xp.uint8)))


def changed(xp: Any, buffers: Sequence[Any], snapshots: Sequence[Any]) -> list[int]:
    """Positions of the ``buffers`` whose bytes differ from their ``snapshots``."""
    return [k for k, (buf, before) in enumerate(zip(buffers, snapshots)) if not same_bytes(xp, buf, before)]


def install_write_back(entry: CUDAGraphEntry, written: Sequence[int]) -> _WriteBack:
    """From now on, every run of ``entry`` copies the ``written`` static buffers back to the caller."""
    entry.written = tuple(written)
    write_back = entry._write_back = _WriteBack(entry._arena, entry.static_inputs, entry.whole_inputs, entry.written)
    if entry.binding is not None:
        # Zero-copy: ``_run_bound`` writes back what it copied; its copy path (padded batches) does too.
        # (Not ``_run_bound_plain``, chosen at capture for entries that write nothing back.)
        entry._run_copied = entry._run_and_write_back
        entry.run = entry._run_bound  # type: ignore[method-assign]
    else:
        entry.run = entry._run_and_write_back  # type: ignore[method-assign]
    return write_back


class FirstReplayWrites:
    """``entry.run`` for an entry's first replay: detect writes into the static inputs, then step aside.

    Installed per instance (the class's ``run`` stays every other entry's hot path). After the
    first replay that completes, ``entry.run`` is the class's again, or the write-back run when
    the function wrote into its copied arguments. A replay that raises leaves the check in place.
    """

    __slots__ = ("entry", "name", "positions", "previous")

    def __init__(self, entry: CUDAGraphEntry, name: str, positions: Sequence[int]):
        self.entry, self.name, self.positions = entry, name, list(positions)
        self.previous = entry.__dict__.get("run")
        """The entry's own ``run`` (zero-copy's ``_run_bound``), put back after the first replay."""

    @classmethod
    def install(cls, entry: CUDAGraphEntry, name: str, positions: Sequence[int]) -> None:
        """Check ``entry``'s first replay; ``positions`` are the argument positions of its static
        buffers (static inputs, then whole inputs), for the log."""
        if entry.static_inputs or entry.whole_inputs:
            entry.run = cls(entry, name, positions)  # type: ignore[method-assign]

    def __call__(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        entry = self.entry
        if entry.__dict__.get("run") is not self:  # already done (a caller kept this object)
            return entry.run(inputs, rows, whole)
        backend = entry.backend
        # Writes not known yet: any argument may be written, so any overlap could hide one.
        entry.check_not_aliased(inputs, whole, range(len(inputs) + len(whole)))
        stream = entry.load_inputs(inputs, rows, whole)
        buffers = entry.static_inputs + entry.whole_inputs
        snapshots = [backend.copy_out(buf, stream) for buf in buffers]
        entry.launch()
        written = changed(backend.xp, buffers, snapshots)
        del snapshots
        if self.previous is not None:
            entry.run = self.previous  # type: ignore[method-assign]
        else:
            entry.__dict__.pop("run", None)
        if written:
            logger.info(
                "%s() wrote into its argument(s) %s on its first replay (no warm-up ran at capture to show it): "
                "each replay now copies them back into the caller's arrays, as the eager call would have changed "
                "them", self.name, [self.positions[k] for k in written],
            )
            write_back = install_write_back(entry, written)
            write_back(inputs, rows, whole)  # this call copied every argument in
        return entry.outputs(rows, stream)
