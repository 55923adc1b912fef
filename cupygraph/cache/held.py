"""The graphs one cache holds: lookups, eviction, memory accounting, and the statistics read from them.

``HeldGraphs`` is the holding half of the graph cache (``GraphStore`` adds what a call of a key
does: capture-after, failed keys, capture). Every graph of a family enters through ``add`` and
leaves through ``_remove`` (eviction, ``remove_key``, ``clear``), which counts it and keeps what it
counted itself.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from typing import Optional

from ..backends import select_backend
from ..backends.base import Backend
from ..config.model import CUDAGraphConfig
from ..dispatch.descriptor import BatchDescriptor
from ..errors import CaptureError
from ..logs import logger
from ..reasons import EvictionReason, FallbackReason
from .checks.freshness import ViewEpoch
from .entry import CUDAGraphEntry, use_tick
from .eviction import EvictionPolicy, eviction_policy
from .key import GraphKey, Signature
from .memory import StaticArenas, total_bytes
from .stats import CUDAGraphStats


class HeldGraphs:
    """The captured graphs of one graph family (one function, or one manager), in one memory pool.

    Contract: it owns its entries and their buffers. Lookups are thread-safe and never wait for a
    capture. When ``max_cached_graphs`` or ``memory_budget`` would be exceeded, entries are evicted
    under the config's ``eviction`` policy (entries with ``min_replays_to_keep`` replays only when
    no colder one is left) and their buffers freed; each eviction is counted with its reason. When
    the last graph goes, the pool's cached memory is returned.
    """

    def __init__(self, config: Optional[CUDAGraphConfig] = None, backend: Optional[Backend] = None):
        self.config = config if config is not None else CUDAGraphConfig()
        self.backend = backend if backend is not None else select_backend(self.config.backend)
        self.eviction: EvictionPolicy = eviction_policy(self.config.eviction, self.config.min_replays_to_keep,
                                                        per_byte=self.config.memory_budget is not None)
        self._entries: OrderedDict[GraphKey, CUDAGraphEntry] = OrderedDict()
        self._seen: Counter[GraphKey] = Counter()
        """Sightings per key: eager calls (capture-after counts them) and the replays of graphs gone."""
        self._lock = threading.RLock()
        self._family_lock = threading.RLock()
        self._arenas = StaticArenas()
        self._stats = CUDAGraphStats()
        self._generation = 0
        self._view_epoch = ViewEpoch()

    @property
    def family_lock(self) -> threading.RLock:
        """Hold it while loading and launching a graph of this family, or capturing one: the family's
        graphs share static inputs and pool scratch, so their host-side sequences must not interleave."""
        return self._family_lock

    @property
    def generation(self) -> int:
        """Changes whenever an entry leaves: a front door that caches entries compares it to know
        its cached lookups may be stale."""
        return self._generation

    # -- lookups ----------------------------------------------------------------------------------

    def lookup(self, key: GraphKey) -> Optional[CUDAGraphEntry]:
        """The entry for ``key`` (marked most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.last_used = use_tick()
            return entry

    def rekey(self, entry: CUDAGraphEntry, key: GraphKey) -> None:
        """Hold ``entry`` under ``key`` from now on: its constants were rebound to the arrays ``key`` names."""
        with self._lock:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
            entry.key = key
            self._entries[key] = entry
            self._generation += 1

    def holds(self, key: GraphKey) -> bool:
        """Whether a graph for ``key`` is held (a query: it does not count as a use)."""
        with self._lock:
            return key in self._entries

    def count_sighting(self, key: GraphKey) -> int:
        """Count an eager call of ``key`` (for hot shapes); return its sightings so far."""
        with self._lock:
            self._seen[key] += 1
            return self._seen[key]

    def entries(self) -> list[CUDAGraphEntry]:
        """The entries held (each one's ``last_used`` says when it last ran)."""
        with self._lock:
            return list(self._entries.values())

    def num_graphs(self) -> int:
        with self._lock:
            return len(self._entries)

    def __len__(self) -> int:
        return self.num_graphs()

    @property
    def recorder(self) -> CUDAGraphStats:
        """The counters the front doors record their calls into (misses, fallbacks, slow-path hits,
        captures, evictions); read statistics with ``stats()``."""
        return self._stats

    def stats(self) -> CUDAGraphStats:
        """The statistics: what the front doors recorded, and what each entry held counts itself (its
        fast paths' hits, its zero-copy binds), read under the family lock, which the replay paths
        hold while counting. A new object per call; ``reset()`` on it resets this cache's counts."""
        with self._family_lock:
            snapshot = self._stats.copy()
            for entry in self.entries():
                snapshot.add_entry(entry.key.mode.name, entry.counts.hits, *entry.tally())
        snapshot._reset_source = self.reset_stats
        return snapshot

    def reset_stats(self) -> None:
        """Every count back to zero: the recorded ones and the entries' own (not their replay counts,
        which eviction reads)."""
        with self._family_lock:
            self._stats.reset()
            for entry in self.entries():
                entry.counts.hits.clear()
                if entry.binding is not None:
                    entry.binding.reset_tally()

    def _fold(self, entry: CUDAGraphEntry) -> None:
        """Keep what a leaving entry counted itself (under the family lock, before it is released)."""
        self._stats.add_entry(entry.key.mode.name, entry.counts.hits, *entry.tally())

    def total_bytes(self) -> int:
        """Bytes held by all entries: recorded outputs/scratch, and static buffers counted once
        (graphs of one signature read views of one shared buffer, sized for the largest batch)."""
        with self._lock:
            return total_bytes(self._entries.values())

    def static_signatures(self) -> set[Signature]:
        """The signatures whose shared static input buffers are held (each held graph's, no more)."""
        with self._lock:
            return self._arenas.signatures()

    def get_hot_shapes(self, top_k: int = 10) -> list[tuple[BatchDescriptor, int]]:
        """The ``top_k`` most used descriptors: eager sightings plus replays (evicted ones too)."""
        with self._lock:
            merged: Counter[BatchDescriptor] = Counter()
            for key, count in self._seen.items():
                merged[key.descriptor] += count
            for key, entry in self._entries.items():
                merged[key.descriptor] += entry.replay_count
            return merged.most_common(top_k)

    # -- holding and evicting -------------------------------------------------------------------

    def add(self, entry: CUDAGraphEntry) -> None:
        """Hold ``entry``, evicting others to stay within ``max_cached_graphs`` and ``memory_budget``.

        An entry above the memory budget on its own is released and refused with ``CaptureError``.
        """
        budget = self.config.memory_budget
        if budget is not None and entry.nbytes > budget:
            entry.release()
            raise CaptureError(
                f"{FallbackReason.OVER_BUDGET.text}: the graph for {entry.key.descriptor} needs {entry.nbytes} "
                f"bytes, above memory_budget={budget} bytes on its own"
            )
        # The family lock first, as everywhere (eviction releases graphs under it): never the other order.
        with self._family_lock, self._lock:
            self._entries[entry.key] = entry
            limit = self.config.max_cached_graphs
            while limit is not None and len(self._entries) > limit:
                if not self.evict_one(EvictionReason.MAX_CACHED_GRAPHS, f"max_cached_graphs={limit} reached",
                                      keep=entry):
                    break
            # The new graph may keep a shared static buffer larger than itself alive, so the
            # total can stay above the budget with nothing left to evict: stop there.
            while budget is not None and self.total_bytes() > budget:
                if not self.evict_one(EvictionReason.MEMORY_BUDGET, f"memory_budget={budget} bytes reached",
                                      keep=entry):
                    break

    def select_victim(self, exclude: Optional[CUDAGraphEntry] = None) -> Optional[CUDAGraphEntry]:
        """The entry eviction would take next under the configured policy."""
        with self._lock:
            victim: Optional[CUDAGraphEntry] = self.eviction.victim(self._entries.values(), exclude)
            return victim

    def evict_one(self, reason: EvictionReason, detail: str, keep: Optional[CUDAGraphEntry] = None) -> bool:
        """Evict the policy's next victim (never ``keep``); False when there is none."""
        victim = self.select_victim(exclude=keep)
        if victim is None:
            return False
        self._remove(victim.key, reason, detail)
        logger.debug("evicted %s (%d replays, %d bytes): %s", victim.key, victim.replay_count, victim.nbytes, detail)
        return True

    def evict(self, key: GraphKey, reason: EvictionReason, detail: Optional[str] = None) -> bool:
        """Drop the entry for ``key``, counted as an eviction with ``reason``; True when one was held."""
        return self._remove(key, reason, detail)

    def remove_key(self, key: GraphKey) -> bool:
        return self._remove(key, EvictionReason.REMOVED, "removed by remove_key()")

    def clear(self) -> None:
        """Drop every graph and return the pool's memory (statistics are kept; each dropped graph
        counts as an eviction by ``clear()``)."""
        with self._family_lock:  # no replay of the family is enqueuing while its graphs are released
            with self._lock:
                entries = list(self._entries.values())
                for entry in entries:
                    self._seen[entry.key] += entry.replay_count
                    self._fold(entry)
                    self._stats.record_eviction(EvictionReason.CLEARED)
                self._entries.clear()
                self._arenas.clear()
                self._generation += 1
                self._view_epoch.bump()
            for entry in entries:
                entry.release()
            self.backend.release_memory()

    def _remove(self, key: GraphKey, reason: EvictionReason, detail: Optional[str] = None) -> bool:
        """Drop the entry for ``key``, counted as an eviction (stats stay whole: captures -
        evictions == graphs held)."""
        with self._family_lock:  # no replay of the family is enqueuing while the graph is released
            with self._lock:
                entry = self._entries.pop(key, None)
                if entry is None:
                    return False
                self._fold(entry)
                self._stats.record_eviction(reason, detail)
                self._generation += 1
                self._view_epoch.bump()
                self._seen[key] += entry.replay_count  # keep its history for get_hot_shapes
            entry.release()
            self._drop_unused_arena(key.signature)
            self._release_if_empty()
            return True

    def _drop_unused_arena(self, signature: Signature) -> None:
        with self._lock:
            self._arenas.drop_unused(signature, self._entries.values())

    def _release_if_empty(self) -> None:
        with self._lock:
            empty = not self._entries
            if empty:
                self._arenas.clear()
        if empty:
            self.backend.release_memory()
