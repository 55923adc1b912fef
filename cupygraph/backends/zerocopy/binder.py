"""The per-call half of zero-copy on the GPU: bind or copy each argument, re-point the nodes.

``node_pointers.find_node_pointers`` found, once per capture, which parameter words of which kernel nodes hold
each buffer's address. A call gathers the address every slot (argument, output, constant) should
hold, launches the executable (a bank of the recording, ``cupy/recording.py``) that already holds them
all; else, while the graph has fewer than ``executables_per_graph`` banks, instantiates one more for
these addresses (a caller cycling among a few buffers, a prefetch ring, then re-points nothing once
each has its bank); else rewrites the words and sets the changed nodes on the least recently used
bank not launched last. Whatever
changes what a bank holds bumps the family's generation, so no compiled record made before
(``fastpath/record.py``) is used again. The caller holds the family lock around ``CupyBinder.bind`` and the
launch that follows.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ...logs import logger
from ..cupy.recording import Bank, CupyRecording
from ..driver import set_params_function
from ..fastpath.record import record_of, references
from .binding import BufferFacts, CopyReason, argument_label, copy_reason, log_copied, output_label, prepare_counts
from .node_pointers import ALIGNMENT, CupyBindings, KernelNode

MAX_BANKS = 8
"""The most executables one graph keeps for caller addresses (the compiled record's limit too;
``executables_per_graph`` chooses up to this many, 8 by default)."""

RECYCLE_BYTES = 64 << 20
"""Outputs up to this size are taken again from the last two calls' outputs once the caller let go of
them; larger ones are allocated every call. A one-kernel call with a 4 MiB output cost 3.9-4.1 µs of
host time above a bare launch allocated fresh, 1.7-1.8 µs taken from the ring (H200, 2026-11-27,
``benchmarks/hot_path.md``), and the ring holds no memory CuPy's pool would not hold anyway (a freed
block stays in the pool's cache)."""
RING = 2


class _Slot:
    """One buffer the binder may re-point: its static buffer's address and the words that hold it."""

    __slots__ = ("buf", "cells", "copies", "eligible", "label", "logged", "nodes", "reason", "recycle",
                 "ring", "shape_dtype", "static_address", "written")

    def __init__(self, label: str, buf: Any, facts: Optional[BufferFacts]):
        self.label, self.buf = label, buf
        self.reason = facts.reason if facts is not None else CopyReason.NOT_AN_ARRAY
        self.eligible = self.reason is None
        patches = facts.patches if facts is not None and self.eligible else []
        self.cells = [(node.cell(at), delta) for node, at, delta in patches]
        self.nodes = tuple(dict.fromkeys(node for node, _, _ in patches))
        self.static_address = self.written = int(buf.data.ptr)
        """The captured address, and the one the parameter blocks hold now (which bank it reached is the bank's)."""
        self.logged = False
        self.copies = 0
        """Calls that copied this argument (the statistics read it: ``CupyBinder.tally``)."""
        self.shape_dtype = (buf.shape, buf.dtype)
        self.ring: list[list[Any]] = []
        """Output arrays handed out lately: [array, stream, references when only the ring held it]."""
        self.recycle = buf is not None and buf.nbytes <= RECYCLE_BYTES

    def point(self, address: int) -> None:
        for cell, delta in self.cells:
            cell.value = address + delta
        self.written = address


class _Layout:
    """What ``copy_reason`` compares of a constant captured by address, without holding the array."""

    __slots__ = ("dtype", "shape", "strides")

    def __init__(self, array: Any):
        self.shape, self.dtype, self.strides = array.shape, array.dtype, array.strides


class CupyBinder:
    """Per call: bind each argument (and output) that may be bound, copy the others."""

    needs_finish = False

    def __init__(self, bindings: CupyBindings, static: Sequence[Any], labels: Sequence[str],
                 leaves: Sequence[Any], bind_outputs: bool, counts: Any, name: str,
                 constants: Sequence[tuple[int, Any]], recording: CupyRecording, executables: int = 1, *,
                 owns: Callable[[int], bool]):
        """``owns``: whether an address lies in the family's pool memory (``CupyBackend.owns``, which
        ``record_of`` reads too), where an argument is never bound (``bind``)."""
        self._device = bindings.device_id
        self._owns = owns
        self._set = set_params_function()
        self._name = name
        self.counts = counts
        """The entry's ``ReplayCounts``: this binder counts its calls there (``bound_calls``), as the
        compiled replay does."""
        self._inputs = [_Slot(label, buf, bindings.inputs.get(int(buf.data.ptr)) if buf.nbytes else None)
                        for label, buf in zip(labels, static)]
        self._outputs: list[_Slot] = []
        self._out_index: list[int] = []
        if bind_outputs:
            for i, (leaf, facts) in enumerate(zip(leaves, bindings.outputs)):
                if facts is not None and facts.reason is None:
                    self._outputs.append(_Slot(output_label(i), leaf, facts))
                    self._out_index.append(i)
        self.binds_outputs = bool(self._outputs)
        self._constants: dict[int, _Slot] = {}
        for position, array in constants:
            facts = bindings.inputs.get(int(array.data.ptr)) if array.nbytes else None
            if facts is not None and facts.reason is None:
                slot = _Slot(argument_label(position), array, facts)
                slot.buf = _Layout(array)  # never keep the caller's weights alive
                self._constants[position] = slot
        self._constant_rebinds: Counter[str] = Counter()
        self._slots = [*self._inputs, *self._outputs, *self._constants.values()]
        self._static_addresses = [slot.static_address for slot in self._slots]
        self._want = list(self._static_addresses)
        """This call's address per slot: inputs, then outputs, then constants (which keep theirs)."""
        self._recording = recording
        recording.banks[0].current = list(self._static_addresses)
        self._max_banks = max(1, min(int(executables), MAX_BANKS))
        """How many banks this graph may have (``executables_per_graph``); lowered to what it has when the
        driver refuses one more."""
        self._used = [0] * MAX_BANKS
        """Per bank, the binder's call clock when it was last launched (least recently used re-pointed first)."""
        self._clock = 0
        self._made = 0
        self._made_seconds = 0.0
        self._made_bytes = 0
        self._repointed = 0
        self.node_updates = 0
        """Kernel nodes set on an executable so far (tests: a steady caller pattern stops adding any)."""
        self.off_static_buffers = False
        """Whether some node may point away from its static buffer (a padded call must point it back)."""
        for slot in self._inputs:
            if slot.reason is not None:
                log_copied(name, slot.label, slot.reason)

    @property
    def eligible(self) -> bool:
        return any(s.eligible for s in self._inputs) or bool(self._outputs) or bool(self._constants)

    @property
    def banks(self) -> int:
        """How many executables of the graph take turns (``cupy.recording.Bank``)."""
        return len(self._recording.banks) if self._recording is not None else 0

    def bind_constants(self, arrays: Sequence[tuple[int, Any]]) -> bool:
        """Point the graph at new constant arrays (position, array) of the captured layouts: all of
        them, or (False) none when one cannot be bound."""
        chosen = []
        for position, array in arrays:
            slot = self._constants.get(position)
            if slot is None or not isinstance(array, cupy.ndarray) or array.data.device_id != self._device:
                return False
            ptr = int(array.data.ptr)
            if copy_reason(slot.buf, array, captured_address=slot.static_address, given_address=ptr,
                           alignment=ALIGNMENT):
                return False
            chosen.append((slot, ptr))
        want = self._want
        want[:] = self._recording.active.current  # the last call's addresses, the constants' new ones
        for slot, ptr in chosen:
            want[self._slots.index(slot)] = ptr
            self._constant_rebinds[slot.label] += 1
        self._commit()
        return True

    def bind(self, inputs: Sequence[Any], whole: Sequence[Any], copy: Any,
             stream: Any) -> tuple[int, Optional[list[Any]]]:
        """Bind or copy (``copy(buf, src, stream)``) every argument, take a fresh array for every bound
        output, and make the executable that holds these addresses the one launched next.

        Returns a bit per copied argument and the fresh outputs (None when no output is bound). An
        output of a recent call on the same ``stream`` that nobody holds any more is taken again:
        what CuPy's pool would do with its memory (hand it to the next allocation on that stream),
        without the cost of allocating, and with no node to re-point.
        """
        copied = 0
        want = self._want
        device = self._device
        owns = self._owns
        i = 0
        for slot, src in zip(self._inputs, [*inputs, *whole] if whole else inputs):
            if slot.eligible and src._c_contiguous:
                memory = src.data
                ptr = memory.ptr
                # copy_reason's rules, of which the shortcut already checked shape and dtype; and never the
                # family's own memory (an output_mode="view" output passed back), which the graph may write
                # before it reads the argument: copied in, it is read as the eager call reads it.
                if (not ptr & (ALIGNMENT - 1) and memory.device_id == device
                        and (ptr == slot.static_address or not owns(ptr))):
                    want[i] = ptr
                    i += 1
                    continue
            want[i] = slot.static_address
            copy(slot.buf, src, stream)
            copied |= 1 << i
            i += 1
            slot.copies += 1
            if not slot.logged and logger.isEnabledFor(logging.DEBUG):
                slot.logged = True
                log_copied(self._name, slot.label,
                           slot.reason or _call_reason(slot.buf, src, device, owns(src.data.ptr)))
        fresh = None
        if self._outputs:
            fresh = []
            for slot in self._outputs:
                array = None
                if slot.recycle:
                    for item in slot.ring:
                        if item[1] == stream and references(item) == item[2]:
                            array = item[0]
                            break
                    if array is None:
                        item = [cupy.ndarray(*slot.shape_dtype), stream, None]
                        item[2] = references(item)
                        slot.ring.append(item)
                        if len(slot.ring) > RING:
                            del slot.ring[0]
                        self._recording_changed()  # a record's ring is no longer the ring
                        array = item[0]
                else:
                    array = cupy.ndarray(*slot.shape_dtype)
                want[i] = array.data.ptr
                i += 1
                fresh.append(array)
        self.counts.bound_calls += 1
        recording = self._recording
        active = recording.active
        if active.current != want:  # (the common case, the same addresses again, costs no call)
            self._commit()
        else:
            self.off_static_buffers = True
            active.fresh = False  # launched next: from now on an update must not wait for it
            self.counts.last_bank = active.index
            self._clock += 1  # (calls the compiled replay serves refresh no bank: LRU among Python's calls)
            self._used[active.index] = self._clock
        return copied, fresh

    def tally(self) -> tuple[Counter[str], Counter[str], dict[str, float]]:
        """Binds and copies so far per argument and output label (every label present): what the
        statistics read. A bound call binds each input it does not copy, and every output."""
        calls = self.counts.bound_calls
        rebinds: Counter[str] = Counter()
        copies: Counter[str] = Counter()
        prepare_counts(rebinds, copies, [slot.label for slot in self._slots])
        for slot in self._inputs:
            rebinds[slot.label] += max(calls - slot.copies, 0)
            copies[slot.label] += slot.copies
        for slot in self._outputs:
            rebinds[slot.label] += calls
        for slot in self._constants.values():
            rebinds[slot.label] += self._constant_rebinds[slot.label]
        return rebinds, copies, {"made": self._made, "seconds": self._made_seconds, "bytes": self._made_bytes,
                                 "repointed_calls": self._repointed}

    def reset_tally(self) -> None:
        """Count binds and copies from zero again (the statistics were reset)."""
        self.counts.bound_calls = 0
        for slot in self._slots:
            slot.copies = 0
        self._constant_rebinds.clear()
        self._made, self._made_seconds, self._made_bytes, self._repointed = 0, 0.0, 0, 0

    def record(self, shortcut: Any, entry: Any, arguments: tuple[Any, ...], as_is: Sequence[bool], lock: Any) -> Any:
        """The compiled replay's record of ``shortcut``'s calls (``fastpath.record``), whose ``arguments`` say
        what each call position must be: for arguments that may all be bound, each output bound (from
        its ring, or fresh) or returned as it is (``as_is``, per leaf of ``entry.leaves``), the constants
        at their current addresses; else None."""
        inputs = self._inputs
        if not inputs or not all(slot.eligible for slot in inputs) or self._recording is None:
            return None
        bound = dict(zip(self._out_index, range(len(inputs), len(inputs) + len(self._outputs))))
        outputs: list[tuple[Any, ...]] = []
        for i, (leaf, plain) in enumerate(zip(entry.leaves, as_is)):
            if i in bound:
                slot = self._slots[bound[i]]
                outputs.append(("ring", bound[i], tuple(slot.ring)) if slot.recycle
                               else ("fresh", bound[i], *slot.shape_dtype))
            elif plain:
                outputs.append(("as_is", leaf))
            else:  # copied out, or a NumPy scalar: the Python path's
                return None
        start = len(inputs) + len(self._outputs)
        fixed = tuple((k, self._want[k]) for k in range(start, len(self._slots)))
        return record_of(shortcut, entry, self._recording, arguments, inputs, tuple(outputs), fixed, lock)

    @property
    def output_positions(self) -> list[int]:
        return self._out_index

    def point_at_static_buffers(self) -> None:
        """Point every node back at the static buffers (before a call that copies them all)."""
        n = len(self._inputs) + len(self._outputs)
        self._want[:n] = self._static_addresses[:n]
        self._commit()
        self.off_static_buffers = False

    def _commit(self) -> None:
        """Make the bank that holds ``_want`` the one the recording launches."""
        want = self._want
        recording = self._recording
        banks = recording.banks
        active = recording.active
        self.off_static_buffers = True
        if active.current == want:
            self._switch(active)
            return
        for bank in banks:
            if bank.current == want:
                self._switch(bank)
                return
        target = active
        if not active.fresh:
            last = banks[self.counts.last_bank] if self.counts.last_bank < len(banks) else active
            if len(banks) < self._max_banks:
                start = time.perf_counter()
                made = recording.add_bank(list(self._static_addresses))
                if made is not None:
                    target = made
                    self._made += 1
                    self._made_seconds += time.perf_counter() - start
                    self._made_bytes += made.nbytes
                else:
                    self._max_banks = len(banks)  # refused once (logged): never instantiated again per call
            if target is active:  # the least recently launched bank, never the one launched last
                others = [bank for bank in banks if bank is not last]
                target = min(others, key=lambda bank: self._used[bank.index]) if others else active
        self._repointed += 1
        dirty: list[KernelNode] = []
        for slot, address, held in zip(self._slots, want, target.current):
            if slot.written != address:
                slot.point(address)  # every word of every node set below must hold this call's address
            if address != held:
                dirty.extend(slot.nodes)
        # Unknown until every node is set: a failure halfway must not leave a list that matches.
        target.current = [-1] * len(want)
        self._recording_changed()
        self._apply(target, dirty)
        target.current = list(want)
        self._switch(target)

    def _recording_changed(self) -> None:
        """What a compiled record describes (a bank's addresses, a ring) changed: none made before is used."""
        self._recording.family.bump()

    def _switch(self, bank: Bank) -> None:
        bank.fresh = False
        self._clock += 1
        self._used[bank.index] = self._clock
        recording = self._recording
        if bank is not recording.active:
            recording.use(bank)
        self.counts.last_bank = bank.index

    def _apply(self, bank: Bank, dirty: list[KernelNode]) -> None:
        nodes = dict.fromkeys(dirty) if len(dirty) > 1 else dirty
        setter, handles = self._set, bank.handles
        for node in nodes:
            executable = handles[node.piece]
            status = setter(executable, node.handle, node.ref)
            if status:
                # A thread whose first CUDA call this is has no current context yet: give it the
                # device's primary context (the runtime does so on its first call), then retry.
                cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
                status = setter(executable, node.handle, node.ref)
                if status:
                    raise RuntimeError(f"{self._name}: cuGraphExecKernelNodeSetParams failed with CUDA error "
                                       f"{status}; set input_binding='copy' to avoid re-pointing graph nodes")
            self.node_updates += 1

    def finish(self, fresh: Optional[Sequence[Any]]) -> None:
        """Nothing to do: the graph wrote the fresh outputs itself."""

    def release(self) -> None:
        for slot in self._outputs:
            for item in slot.ring:  # a record made before holds the ring's items: emptied, they hold no array
                item.clear()
            slot.ring = []
        self._recording = None  # type: ignore[assignment]
        self._constants = {}
        self._inputs, self._outputs, self._slots = [], [], []


def _call_reason(buf: Any, src: Any, device: int, family_memory: bool) -> CopyReason:
    if src.data.device_id != device:
        return CopyReason.DEVICE
    if family_memory:
        return CopyReason.FAMILY_MEMORY
    return copy_reason(buf, src, captured_address=int(buf.data.ptr), given_address=int(src.data.ptr),
                       alignment=ALIGNMENT) or CopyReason.STRIDES
