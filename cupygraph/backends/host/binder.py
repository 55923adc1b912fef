"""Zero-copy on the host reference: the replay re-executes on the caller's array where the GPU would
re-point its graph, by the same rules (``binding.copy_reason`` decides every call).

What the GPU learns from the graph's nodes the host cannot see; it refuses what it can see the
GPU refuse: PIECEWISE recordings, inputs an output is a view of, outputs that are arguments or
share memory with another output, non-contiguous outputs. A bound output is a fresh array the
replay's result is written into, as the GPU's graph writes straight into one.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np

from ...logs import logger
from ..relay import NO_RELAY, RelayRequest, carries, relayed_positions
from ..zerocopy.binding import (
    BufferFacts,
    CopyReason,
    argument_label,
    copy_reason,
    log_copied,
    output_label,
    prepare_counts,
)


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def host_facts(args: Sequence[Any], leaves: Sequence[Any], piecewise: bool, library_state: bool = False,
               relayed: RelayRequest = NO_RELAY) -> tuple[dict[int, BufferFacts], list[Optional[BufferFacts]]]:
    """Facts per argument array (by ``id``) and per output leaf, as the GPU's analysis would find them
    (``library_state``: the GPU's recording holds some, and binds nothing but what it relays, ``relayed``)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    outs = [leaf if isinstance(leaf, np.ndarray) else None for leaf in leaves]
    if library_state:
        library = BufferFacts(CopyReason.LIBRARY_STATE)
        relayed_ids = {id(args[p]) for p in relayed_positions(args, relayed, _is_numpy)}
        return ({id(a): BufferFacts(None) if id(a) in relayed_ids else library for a in arrays},
                [None if leaf is None else BufferFacts(None) if relayed.outputs and carries(leaf, _is_numpy)
                 else library for leaf in outs])
    inputs: dict[int, BufferFacts] = {}
    for array in arrays:
        if piecewise:
            inputs[id(array)] = BufferFacts(CopyReason.PIECEWISE)
        elif any(o is not None and np.may_share_memory(o, array.base if array.base is not None else array)
                 for o in outs):
            inputs[id(array)] = BufferFacts(CopyReason.OUTPUT_ALIAS)
        else:
            inputs[id(array)] = BufferFacts(None)
    outputs: list[Optional[BufferFacts]] = []
    for i, leaf in enumerate(outs):
        if leaf is None:
            outputs.append(None)
        elif piecewise:
            outputs.append(BufferFacts(CopyReason.PIECEWISE))
        elif not leaf.flags.c_contiguous:
            outputs.append(BufferFacts(CopyReason.STRIDES))
        elif any(np.may_share_memory(leaf, a) for a in arrays):
            outputs.append(BufferFacts(CopyReason.NOT_OWNED))
        elif any(j != i and o is not None and np.may_share_memory(leaf, o) for j, o in enumerate(outs)):
            outputs.append(BufferFacts(CopyReason.SHARED_ALLOCATION))
        else:
            outputs.append(BufferFacts(None))
    return inputs, outputs


class HostBinder:
    """Per call: the replay's argument list takes the caller's array where ``copy_reason`` allows."""

    needs_finish = True

    def __init__(self, call_args: list[Any], facts: tuple[dict[int, BufferFacts], list[Optional[BufferFacts]]],
                 static: Sequence[Any], labels: Sequence[str], leaves: Sequence[Any], bind_outputs: bool,
                 counts: Any, name: str, constants: Sequence[tuple[int, Any]] = ()):
        inputs, outputs = facts
        self._args = call_args
        self._name = name
        self._slots = []
        for label, buf in zip(labels, static):
            position = next((i for i, a in enumerate(call_args) if a is buf), None)
            found = inputs.get(id(buf))
            reason = found.reason if found is not None and position is not None else CopyReason.NOT_AN_ARRAY
            self._slots.append((label, buf, position, reason))
            if reason is not None:
                log_copied(name, label, reason)
        self._bits = [1 << i for i in range(len(self._slots))]
        bound = [i for i, f in enumerate(outputs) if f is not None and f.reason is None]
        self._out_index = bound if bind_outputs else []
        self._leaves = [leaves[i] for i in self._out_index]
        self.binds_outputs = bool(self._out_index)
        self.off_static_buffers = False
        self._logged: set[tuple[str, CopyReason]] = set()
        self.counts = counts
        """The entry's ``ReplayCounts`` (its zero-copy calls: ``bound_calls``), as the GPU binder's."""
        self._rebinds: Counter[str] = Counter()
        self._copies: Counter[str] = Counter()
        # Constants: (position, layout) of those the GPU could re-point (every array argument here).
        self._constants = {position: SimpleNamespace(shape=array.shape, dtype=array.dtype, strides=array.strides)
                           for position, array in constants
                           if inputs.get(id(array)) is not None and inputs[id(array)].reason is None}
        self._out_labels = [output_label(i) for i in self._out_index]
        self._labels = [s[0] for s in self._slots] + self._out_labels + [argument_label(p) for p in self._constants]
        prepare_counts(self._rebinds, self._copies, self._labels)

    @property
    def eligible(self) -> bool:
        return any(s[3] is None for s in self._slots) or self.binds_outputs or bool(self._constants)

    def bind_constants(self, arrays: Sequence[tuple[int, Any]]) -> bool:
        """The replay reads new constant arrays of the captured layouts: all of them, or (False) none."""
        for position, array in arrays:
            layout = self._constants.get(position)
            if layout is None or not isinstance(array, np.ndarray):
                return False
            if copy_reason(layout, array, captured_address=0, given_address=_address(array),
                           alignment=layout.dtype.alignment):
                return False
        for position, array in arrays:
            self._args[position] = array
            self._rebinds[argument_label(position)] += 1
        return True

    @property
    def output_positions(self) -> list[int]:
        return self._out_index

    def bind(self, inputs: Sequence[Any], whole: Sequence[Any], copy: Any,
             stream: Any) -> tuple[int, Optional[list[Any]]]:
        """The GPU binder's ``bind``: a bit per copied argument, and fresh outputs (None: none bound)."""
        copied = 0
        self.counts.bound_calls += 1
        args = self._args
        for bit, (label, buf, position, fixed), src in zip(self._bits, self._slots, [*inputs, *whole]):
            reason = fixed or copy_reason(buf, src, captured_address=_address(buf), given_address=_address(src),
                                          alignment=buf.dtype.alignment)
            if reason is None:
                args[position] = src  # type: ignore[index]
                self.off_static_buffers = True
                self._rebinds[label] += 1
                continue
            if position is not None:
                args[position] = buf
            copy(buf, src, stream)
            self._copies[label] += 1
            copied |= bit
            if (label, reason) not in self._logged and logger.isEnabledFor(logging.DEBUG):
                self._logged.add((label, reason))
                log_copied(self._name, label, reason)
        if not self.binds_outputs:
            return copied, None
        for label in self._out_labels:
            self._rebinds[label] += 1
        return copied, [np.empty(leaf.shape, leaf.dtype) for leaf in self._leaves]

    def tally(self) -> tuple[Counter[str], Counter[str], dict[str, float]]:
        """Binds and copies so far per argument and output label (every label present); no executables
        (a host replay re-executes the function: nothing to re-point)."""
        return Counter(self._rebinds), Counter(self._copies), {}

    def reset_tally(self) -> None:
        """Count binds and copies from zero again (the statistics were reset)."""
        self.counts.bound_calls = 0
        self._rebinds.clear()
        self._copies.clear()
        prepare_counts(self._rebinds, self._copies, self._labels)

    def finish(self, fresh: Optional[Sequence[Any]]) -> None:
        """After the replay: let go of the caller's arrays (a graph holds only their addresses), and
        write the fresh outputs (the replay wrote the static ones; a graph writes the fresh arrays)."""
        if self.off_static_buffers:
            self.point_at_static_buffers()
        for array, leaf in zip(fresh or (), self._leaves):
            np.copyto(array, leaf)

    def point_at_static_buffers(self) -> None:
        """The replay reads the static buffers again (before a call that copies into them)."""
        for _label, buf, position, _reason in self._slots:
            if position is not None:
                self._args[position] = buf
        self.off_static_buffers = False

    def release(self) -> None:
        self._slots, self._leaves = [], []
