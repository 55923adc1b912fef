"""The registry of captured graphs: entries, lookup, eviction, memory accounting and statistics."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .backends import select_backend
from .backends.base import Backend
from .config import CUDAGraphConfig, CUDAGraphMode
from .descriptor import BatchDescriptor
from .entry import CUDAGraphEntry, GraphEntry, InputArena, base_array, check_outputs, same_bytes
from .errors import CaptureError
from .freshness import ViewEpoch
from .key import NO_SIGNATURE, GraphKey, Signature
from .pytree import flatten
from .reasons import EvictionReason, FallbackReason
from .stats import CUDAGraphStats

logger = logging.getLogger("cupygraph")

__all__ = ["CUDAGraphEntry", "CUDAGraphRegistry", "GraphEntry", "GraphKey", "InputArena"]


def _drop_frame_locals(err: Optional[BaseException]) -> None:
    """Clear the locals of the finished frames in ``err``'s tracebacks (and its causes')."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        err = err.__cause__ or err.__context__


class CUDAGraphRegistry:
    """Registry of the captured graphs of one function (one graph family, one memory pool).

    Contract: the registry owns its entries and their buffers. Lookups are thread-safe and never
    wait for a capture; captures are serialised per registry (and per device by the backend).
    When ``max_cached_graphs`` or ``memory_budget`` would be exceeded, entries are evicted (LRU or
    LFU; entries with ``min_replays_to_keep`` replays only when no colder one is left) and their
    buffers freed; each eviction is counted with its reason. When the last graph goes, the pool's
    cached memory is returned.
    """

    def __init__(self, config: Optional[CUDAGraphConfig] = None, backend: Optional[Backend] = None):
        self.config = config if config is not None else CUDAGraphConfig()
        self.backend = backend if backend is not None else select_backend(self.config.backend)
        self._entries: OrderedDict[GraphKey, CUDAGraphEntry] = OrderedDict()
        self._seen: Counter[GraphKey] = Counter()
        self._lock = threading.RLock()
        self.exec_lock = threading.RLock()
        """Held while a graph of this family is loaded and launched, or captured: the family's
        graphs share static inputs and pool scratch, so their host-side sequences must not interleave."""
        self._arenas: dict[Signature, InputArena] = {}
        self._stats = CUDAGraphStats()
        self.generation = 0
        """Bumped whenever an entry leaves, so front doors know their cached lookups went stale."""
        self.view_epoch = ViewEpoch()
        """Counts writes of this family's static buffers; debug mode uses it to find stale views."""

    # -- keyed API (front doors) ------------------------------------------------------------------

    def lookup(self, key: GraphKey) -> Optional[CUDAGraphEntry]:
        """The entry for ``key`` (marked most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.last_used = time.perf_counter()
            return entry

    def note_seen(self, key: GraphKey, count: int = 1) -> int:
        """Count a sighting of ``key`` (for ``capture_after`` and hot shapes); return the total.

        Pass ``count=-1`` to take back a sighting that became the graph's first replay.
        """
        with self._lock:
            self._seen[key] += count
            return self._seen[key]

    def capture_entry(
        self,
        key: GraphKey,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]] = None,
        batched: Sequence[int] = (0,),
        copied: Sequence[int] = (),
        out_batched: Any = None,
    ) -> CUDAGraphEntry:
        """Record ``fn(*args, **kwargs)`` for ``key`` and register it (or return the existing entry).

        The arrays at positions ``batched`` are copied into static buffers of
        ``key.descriptor.num_tokens`` rows (padding filled with ``pad_value``); those at ``copied``
        into static buffers of their own shape; every other argument is passed as it is, so arrays
        among them are captured by address. Raises ``CaptureError`` when the function cannot be
        recorded, writes into one of its copied arguments (detected by the warm-up, or by the run
        itself on the host backend), or its graph alone exceeds the memory budget.
        """
        kwargs = kwargs or {}
        with self.exec_lock:
            existing = self.lookup(key)
            if existing is not None:
                return existing
            entry = self._capture(key, fn, args, kwargs, batched, copied, out_batched)
            budget = self.config.memory_budget
            if budget is not None and self.backend.pool_bytes() > budget and self.num_graphs() > 1:
                # The pool still holds the blocks of evicted graphs: graphs of a family share
                # blocks, so none can be handed back while another graph lives. Drop them all,
                # return the memory, and record this key again on its own.
                logger.info("pool holds %d bytes, above memory_budget=%d: dropping every graph to return it",
                            self.backend.pool_bytes(), budget)
                detail = f"memory_budget={budget} bytes reached by the pool with cached blocks: all graphs dropped"
                for victim in self.entries():
                    self._remove_entry(victim.key, EvictionReason.POOL_OVER_BUDGET, detail)
                entry = self._capture(key, fn, args, kwargs, batched, copied, out_batched)
            return entry

    def _capture(
        self, key: GraphKey, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
        batched: Sequence[int], copied: Sequence[int], out_batched: Any,
    ) -> CUDAGraphEntry:
        backend, padded = self.backend, key.descriptor.num_tokens
        backend.order_after_last_use()
        self.view_epoch.bump()  # warm-ups and the capture may write where view outputs point
        arena = self._arenas.get(key.signature)
        if arena is None:
            arena = self._arenas[key.signature] = InputArena()
        arena.state = None  # the buffers are rewritten below, padding included
        call_args, static_inputs, whole_inputs = list(args), [], []
        watched: list[tuple[int, Any]] = []
        snapshots: list[Any] = []
        recording = None
        try:
            try:
                for index in batched:
                    src = args[index]
                    buf = arena.view(backend, index, (padded, *src.shape[1:]), src.dtype)
                    backend.copy_rows(buf, src)
                    if src.shape[0] < padded:
                        backend.fill_rows(buf, src.shape[0], self.config.pad_value)
                    call_args[index] = buf
                    static_inputs.append(buf)
                for index in copied:
                    src = args[index]
                    buf = arena.view(backend, index, tuple(src.shape), src.dtype)
                    backend.copy_rows(buf, src)
                    call_args[index] = buf
                    whole_inputs.append(buf)
                # What the copies held before the function ran: a function that writes into them
                # would, under a graph, write into the static copy while the caller's array keeps
                # its values.
                watched = list(zip(list(batched) + list(copied), static_inputs + whole_inputs))
                snapshots = [backend.copy_out(buf) for _, buf in watched]
                start = time.perf_counter()
                recording = backend.capture(
                    fn, call_args, kwargs,
                    num_warmups=self.config.num_warmups,
                    capture_mode=self.config.capture_mode,
                    gc_freeze=self.config.gc_freeze,
                    piecewise=key.mode is CUDAGraphMode.PIECEWISE,
                )
            except MemoryError as err:
                # The family's pool (or the device) refused the static buffers or a warm-up
                # allocation: like an allocation refused during capture, the key runs eagerly.
                raise CaptureError(
                    f"{FallbackReason.OUT_OF_MEMORY.text}: the static buffers or warm-up of the graph for "
                    f"{key.descriptor}: {err}"
                ) from err
            check_outputs(recording.outputs, backend.is_array)
            seconds = time.perf_counter() - start
            written = [k for k, ((_, buf), before) in enumerate(zip(watched, snapshots))
                       if not same_bytes(backend.xp, buf, before)]
            snapshots = []
            if written:
                logger.info(
                    "%s() writes into its argument(s) %s: each replay copies them back into the caller's "
                    "arrays, as the eager call would have changed them", getattr(fn, "__name__", "the function"),
                    [watched[k][0] for k in written],
                )
            entry = CUDAGraphEntry(
                key, recording, backend, static_inputs,
                tuple(backend.address(b) for b in static_inputs),
                whole_inputs=whole_inputs, arena=arena,
                pad_value=self.config.pad_value, output_mode=self.config.output_mode,
                capture_time=seconds, out_batched=out_batched, written=written,
            )
        except BaseException as err:
            self._stats.record_capture_failure()
            if recording is not None:
                recording.release()
            if isinstance(err, CaptureError):
                # Nobody reads the frames of a capture that fell back: let go of the static
                # buffers and temporaries they hold, so the memory can go back below.
                _drop_frame_locals(err)
            # This frame stays referenced by the exception's traceback: drop what holds buffers.
            del static_inputs, whole_inputs, call_args, watched, snapshots
            recording = arena = buf = src = None
            self._drop_unused_arena(key.signature)
            self._release_if_empty()
            raise
        try:
            self._insert(entry)
        except CaptureError:
            self._stats.record_capture_failure()
            self._drop_unused_arena(key.signature)
            raise
        self._stats.record_capture(key.mode.name, seconds)
        logger.debug("captured %s in %.2f ms (%d bytes)", key, 1e3 * seconds, entry.nbytes)
        return entry

    def _insert(self, entry: CUDAGraphEntry) -> None:
        budget = self.config.memory_budget
        if budget is not None and entry.nbytes > budget:
            entry.release()
            self._release_if_empty()
            raise CaptureError(
                f"{FallbackReason.OVER_BUDGET.text}: the graph for {entry.key.descriptor} needs {entry.nbytes} "
                f"bytes, above memory_budget={budget} bytes on its own"
            )
        with self._lock:
            self._entries[entry.key] = entry
            limit = self.config.max_cached_graphs
            while limit is not None and len(self._entries) > limit:
                if not self._evict_one(entry, EvictionReason.MAX_CACHED_GRAPHS, f"max_cached_graphs={limit} reached"):
                    break
            # The new graph may keep a shared static buffer larger than itself alive, so the
            # total can stay above the budget with nothing left to evict: stop there.
            while budget is not None and self.total_bytes() > budget:
                if not self._evict_one(entry, EvictionReason.MEMORY_BUDGET, f"memory_budget={budget} bytes reached"):
                    break

    def _evict_one(self, keep: CUDAGraphEntry, reason: EvictionReason, detail: str) -> bool:
        victim = self.select_victim(exclude=keep)
        if victim is None:
            return False
        self._remove_entry(victim.key, reason, detail)
        logger.debug("evicted %s (%d replays, %d bytes): %s", victim.key, victim.replay_count, victim.nbytes, detail)
        return True

    def select_victim(self, exclude: Optional[CUDAGraphEntry] = None) -> Optional[CUDAGraphEntry]:
        """The entry eviction would take next under the configured policy."""
        with self._lock:
            candidates = [e for e in self._entries.values() if e is not exclude]
            if not candidates:
                return None
            keep = self.config.min_replays_to_keep
            if keep > 0:
                cold = [e for e in candidates if e.replay_count < keep]
                candidates = cold or candidates
            if self.config.eviction == "lfu":
                return min(candidates, key=lambda e: (e.replay_count, e.last_used))
            # last_used is stamped on every launch: the replay hot path never touches the registry.
            return min(candidates, key=lambda e: e.last_used)

    def evict(self, key: GraphKey, reason: EvictionReason, detail: Optional[str] = None) -> bool:
        """Drop the entry for ``key``, counted as an eviction with ``reason``; True when one was held."""
        return self._remove_entry(key, reason, detail)

    def _remove_entry(self, key: GraphKey, reason: Optional[EvictionReason] = None,
                      detail: Optional[str] = None) -> bool:
        """Drop the entry for ``key``; with ``reason``, count it as an eviction (stats stay whole:
        captures - evictions == graphs held)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                if reason is not None:
                    self._stats.record_eviction(reason, detail)
                self.generation += 1
                self.view_epoch.bump()
                self._seen[key] += entry.replay_count  # keep its history for get_hot_shapes
        if entry is None:
            return False
        entry.release()
        self._drop_unused_arena(key.signature)
        self._release_if_empty()
        return True

    def _drop_unused_arena(self, signature: Signature) -> None:
        """Let go of static buffers no held graph reads: a signature's whole arena when none of its
        graphs is left (each new shape makes one), else a larger buffer whose graph was evicted."""
        with self._lock:
            arena = self._arenas.get(signature)
            if arena is None:
                return
            used = {id(base_array(buf)) for e in self._entries.values() if e.key.signature == signature
                    for buf in e.static_inputs + e.whole_inputs}
            if not used:
                del self._arenas[signature]
                return
            for position, buf in list(arena.buffers.items()):
                if id(buf) not in used:
                    del arena.buffers[position]

    def _release_if_empty(self) -> None:
        with self._lock:
            empty = not self._entries
            if empty:
                self._arenas.clear()
        if empty:
            self.backend.release_memory()

    def total_bytes(self) -> int:
        """Bytes held by all entries: recorded outputs/scratch, and static buffers counted once
        (graphs of one signature read views of one shared buffer, sized for the largest batch)."""
        with self._lock:
            statics: dict[int, int] = {}
            total = 0
            for entry in self._entries.values():
                total += entry.cudagraph.nbytes
                for buf in entry.static_inputs + entry.whole_inputs:
                    base = base_array(buf)
                    statics[id(base)] = int(base.nbytes)
            return total + sum(statics.values())

    def entries(self) -> list[CUDAGraphEntry]:
        with self._lock:
            return list(self._entries.values())

    # -- the seed's API: keys by batch size and sequence length --------------------------------

    def make_key(
        self, batch_size: int, seq_len: Optional[int] = None, mode: CUDAGraphMode = CUDAGraphMode.FULL,
        signature: Signature = NO_SIGNATURE,
    ) -> Optional[GraphKey]:
        """The key a batch of this size lands on after padding, or None when it would run eagerly."""
        padded = self.config.get_padded_batch_size(batch_size)
        seq = self.config.get_padded_seq_len(seq_len)
        if padded is None or (seq_len is not None and seq is None):
            return None
        return GraphKey(BatchDescriptor(padded, seq_len=seq), CUDAGraphMode.parse(mode), signature)

    def capture(
        self,
        batch_size: int,
        seq_len: Optional[int],
        capture_fn: Callable[..., Any],
        input_shapes: Sequence[Any],
        output_shapes: Optional[Sequence[Sequence[int]]] = None,
        *,
        inputs: Optional[Sequence[Any]] = None,
        dtype: Any = "float32",
        mode: CUDAGraphMode = CUDAGraphMode.FULL,
        signature: Signature = NO_SIGNATURE,
    ) -> CUDAGraphEntry:
        """Capture ``capture_fn(*inputs)`` for a batch of ``batch_size`` rows.

        ``input_shapes`` gives each input's shape for the real batch (leading axis = batch) or a
        ``(shape, dtype)`` pair; buffers are padded to the capture size. ``inputs``, when given,
        are copied in first (otherwise the buffers start filled with ``pad_value``).
        ``output_shapes``, when given, are checked against what the function returned.
        """
        key = self.make_key(batch_size, seq_len, mode, signature)
        if key is None:
            raise CaptureError(
                f"batch_size={batch_size}, seq_len={seq_len} is above the largest capture size "
                f"{self.config.largest_capture_size}; such batches run eagerly"
            )
        xp = self.backend.xp
        if inputs is None:
            specs = [s if len(s) == 2 and not isinstance(s[0], int) else (s, dtype) for s in map(tuple, input_shapes)]
            inputs = [xp.full(tuple(shape), self.config.pad_value, dtype=dt) for shape, dt in specs]
        entry = self.capture_entry(key, capture_fn, list(inputs), {}, batched=range(len(inputs)))
        if output_shapes is not None:
            leaves, _ = flatten(entry.cudagraph.outputs, self.backend.is_array)
            got = [tuple(leaf.shape[1:]) if sliced else tuple(leaf.shape)
                   for leaf, sliced in zip(leaves, entry._sliced)]
            want = [tuple(s)[1:] if len(s) and s[0] == batch_size else tuple(s) for s in output_shapes]
            if got != want:
                detail = f"trailing shapes {got}, expected {want}"
                self._remove_entry(key, EvictionReason.UNEXPECTED_OUTPUT_SHAPES, detail)
                raise CaptureError(f"capture_fn returned outputs of trailing shapes {got}, expected {want}")
        return entry

    def get(self, batch_size: int, seq_len: Optional[int] = None, *, mode: CUDAGraphMode = CUDAGraphMode.FULL,
            signature: Signature = NO_SIGNATURE) -> Optional[CUDAGraphEntry]:
        key = self.make_key(batch_size, seq_len, mode, signature)
        return None if key is None else self.lookup(key)

    def has(self, batch_size: int, seq_len: Optional[int] = None, *, mode: CUDAGraphMode = CUDAGraphMode.FULL,
            signature: Signature = NO_SIGNATURE) -> bool:
        """Whether a graph for this batch is held (a query: it does not count as a use)."""
        key = self.make_key(batch_size, seq_len, mode, signature)
        with self._lock:
            return key is not None and key in self._entries

    def has_descriptor(self, descriptor: BatchDescriptor, mode: CUDAGraphMode) -> bool:
        """Whether any graph (of any signature) is held for this padded descriptor and mode."""
        with self._lock:
            return any(k.descriptor == descriptor and k.mode is mode for k in self._entries)

    def remove(self, batch_size: int, seq_len: Optional[int] = None, *, mode: CUDAGraphMode = CUDAGraphMode.FULL,
               signature: Signature = NO_SIGNATURE) -> bool:
        """Drop the graph a batch of this size would use; True when one was held."""
        key = self.make_key(batch_size, seq_len, mode, signature)
        return key is not None and self._remove_entry(key, EvictionReason.REMOVED, "removed by remove()")

    def remove_key(self, key: GraphKey) -> bool:
        return self._remove_entry(key, EvictionReason.REMOVED, "removed by remove_key()")

    def clear(self) -> None:
        """Drop every graph and return the pool's memory (statistics are kept; each dropped graph
        counts as an eviction by ``clear()``)."""
        with self._lock:
            entries = list(self._entries.values())
            for entry in entries:
                self._seen[entry.key] += entry.replay_count
                self._stats.record_eviction(EvictionReason.CLEARED)
            self._entries.clear()
            self._arenas.clear()
            self.generation += 1
            self.view_epoch.bump()
        for entry in entries:
            entry.release()
        self.backend.release_memory()

    def num_graphs(self) -> int:
        with self._lock:
            return len(self._entries)

    def __len__(self) -> int:
        return self.num_graphs()

    def stats(self) -> CUDAGraphStats:
        return self._stats

    def get_hot_shapes(self, top_k: int = 10) -> list[tuple[BatchDescriptor, int]]:
        """The ``top_k`` most used descriptors: eager sightings plus replays (evicted ones too)."""
        with self._lock:
            merged: Counter[BatchDescriptor] = Counter()
            for key, count in self._seen.items():
                merged[key.descriptor] += count
            for key, entry in self._entries.items():
                merged[key.descriptor] += entry.replay_count
            return merged.most_common(top_k)
