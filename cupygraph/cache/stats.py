"""Counters for graph use: what was captured, replayed, evicted and why calls ran eagerly, and what each
key's capture cost (``GraphCost``: its memory and time, measured at capture)."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from ..reasons import EvictionReason, FallbackReason, RecaptureReason
from .histogram import SizeHistogram

MAX_GRAPH_COSTS = 1024
"""Keys whose capture cost the statistics keep (the latest captured): bounded however varied the keys."""


@dataclasses.dataclass(frozen=True)
class GraphCost:
    """What one key's capture cost, measured when it was captured (``cache/recording.py``).

    ``pool_bytes``: memory the family took for this key. On a backend with a pool of its own (the GPU's:
    ``Backend.has_pool``), what the pool asked the device for while the key's static buffers were made and
    its warm-ups and capture ran (``Backend.pool_bytes()`` after less before: each ``cudaMalloc`` of the
    family's ``DeviceBlocks``, alignment included). A family's graphs share the pool's blocks (a smaller
    graph captured after a larger one reuses its scratch and its static buffers' views), so this is what
    the key added, not what its graph alone would need; over a family's keys it sums to what the pool
    holds. On the host backend: the bytes of the static buffers made for the key (its outputs are plain
    NumPy arrays, in no pool).

    ``executable_bytes``: device memory the driver took to make and upload the key's executables, or None
    where nothing was measured; ``executable_source`` says how it was measured, or why not. No CUDA API
    reports an executable's memory (there is no ``cuGraphExecGetMemory``; ``cuDeviceGetGraphMemAttribute``
    counts only the allocation nodes' memory, which cupygraph's captures do not make): the GPU backend
    reads the device's free memory (``cudaMemGetInfo``) around the instantiations and the upload, less what
    the pool took meanwhile.

    ``capture_s``: the capture's time (warm-ups, stream capture, instantiation, PDL and upload), on a
    monotonic clock (``time.perf_counter``).
    """

    mode: str
    size: int
    """The key's padded batch size (rows of its static buffers)."""
    seq_len: Optional[int]
    signature: str
    """The key's arguments in words (``Signature.describe``), shortened."""
    pool_bytes: int
    executable_bytes: Optional[int]
    executable_source: str
    capture_s: float
    key_hash: int = dataclasses.field(default=0, compare=False, repr=False)
    """The key's hash: tells apart keys whose shortened words agree (not saved: it differs between processes)."""

    @property
    def total_bytes(self) -> int:
        """``pool_bytes`` plus ``executable_bytes`` where measured: what ``plan-sizes`` counts per key."""
        return self.pool_bytes + (self.executable_bytes or 0)

    @property
    def label(self) -> tuple[str, int, Optional[int], str, int]:
        """What tells two keys' costs apart."""
        return self.mode, self.size, self.seq_len, self.signature, self.key_hash

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "size": self.size, "seq_len": self.seq_len, "signature": self.signature,
                "pool_bytes": self.pool_bytes, "executable_bytes": self.executable_bytes,
                "executable_source": self.executable_source, "capture_s": round(self.capture_s, 6)}


@dataclasses.dataclass
class CUDAGraphStats:
    """Statistics of one registry (one function's graphs).

    A call is a hit when it replays a graph that already existed and a miss otherwise (it captured
    or ran eagerly), so ``hits + misses == calls``; ``captures - evictions == graphs held``.

    Reasons are counted by code (``FallbackReason``, ``EvictionReason``, ``RecaptureReason``;
    the ``*_by_reason`` counters are keyed by the code's value), and ``last_detail_by_reason``
    keeps the last detail of each code (a batch size, the op and the user's line): the
    statistics stay bounded however varied the traffic. ``batch_sizes`` counts calls per real
    batch size (bounded too: ``SizeHistogram``; not in ``to_dict``, which stays small: read it with
    ``batch_sizes.to_dict()``).

    ``graph_costs`` keeps what each key's last capture cost (``GraphCost``: memory and time), also after
    its graph was evicted (``plan-sizes`` plans from it), for the latest ``MAX_GRAPH_COSTS`` keys.

    ``GraphStore.stats()`` gives a new object each time: what the front doors recorded, plus what the
    entries held count themselves (their fast paths' hits and zero-copy binds, ``add_entry``);
    ``reset()`` on it resets the store's counts too.
    """

    hits: int = 0
    misses: int = 0
    captures: int = 0
    replays: int = 0
    evictions: int = 0
    capture_failures: int = 0
    capture_time_s: float = 0.0
    evictions_by_reason: Counter[str] = dataclasses.field(default_factory=Counter)
    fallbacks_by_reason: Counter[str] = dataclasses.field(default_factory=Counter)
    captures_by_mode: Counter[str] = dataclasses.field(default_factory=Counter)
    replays_by_mode: Counter[str] = dataclasses.field(default_factory=Counter)
    fallbacks_by_mode: Counter[str] = dataclasses.field(default_factory=Counter)
    recaptures_by_reason: Counter[str] = dataclasses.field(default_factory=Counter)
    pdl_edges_converted: int = 0
    """Graph edges made programmatic (PDL) over all captures, so a kernel starts while its producer ends."""
    pdl_edges_kept_by_reason: Counter[str] = dataclasses.field(default_factory=Counter)
    """Edges left plain, by reason (producer_not_kernel, consumer_does_not_wait, consumer_not_scanned, ...)."""
    rebinds_by_argument: Counter[str] = dataclasses.field(default_factory=Counter)
    """Replays that bound an argument (``"argument 0"``) or output (``"output 0"``) to the caller's array
    instead of copying it (``input_binding="auto"``). A ``constant_argnums`` argument is read by address on
    every replay, so it is counted differently: once per new array bound to a held graph instead of a
    re-capture (``GraphStore._bind_new_constants``)."""
    copies_by_argument: Counter[str] = dataclasses.field(default_factory=Counter)
    """Replays that copied an argument into its static buffer although binding was on (debug logs say why)."""
    last_detail_by_reason: dict[str, str] = dataclasses.field(default_factory=dict)
    batch_sizes: SizeHistogram = dataclasses.field(default_factory=SizeHistogram)
    baked_uploads: dict[str, int] = dataclasses.field(default_factory=dict)
    """Host uploads baked into graphs as constants (issue 20): call and user's line -> bytes per graph
    (one entry per place in the code, so it stays bounded)."""
    executables_made: int = 0
    """Executables instantiated beyond each graph's first, each to hold another set of caller addresses
    (zero-copy; ``executables_per_graph`` bounds them per graph)."""
    executable_instantiate_s: float = 0.0
    """The time those instantiations took (each paid once)."""
    executable_bytes_made: int = 0
    """The device memory those executables took (the device's free memory before and after each
    instantiation and upload, ``cudaMemGetInfo``); the host backend makes none."""
    repointed_calls: int = 0
    """Zero-copy calls whose addresses no executable held: an executable's nodes were re-pointed."""
    routed_calls: Counter[str] = dataclasses.field(default_factory=Counter)
    """Library calls routed to cupygraph's capture-safe implementations (issue 29): call -> graphs
    captured with it (bounded by the kinds of call, not by traffic)."""
    graph_costs: dict[tuple[str, int, Optional[int], str, int], GraphCost] = dataclasses.field(default_factory=dict)
    """Per key (``GraphCost.label``), what its last capture cost: pool and executable bytes, capture time."""
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)
    _reset_source: Optional[Callable[[], None]] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def calls(self) -> int:
        return self.hits + self.misses

    @property
    def fallbacks(self) -> int:
        """Calls that ran eagerly, whatever the reason."""
        return sum(self.fallbacks_by_reason.values())

    def hit_rate(self) -> float:
        """Fraction of calls that replayed an existing graph (0.0 before any call)."""
        calls = self.calls
        return self.hits / calls if calls else 0.0

    def record_hit(self, mode: str) -> None:
        """A call that replayed a graph that already existed."""
        with self._lock:
            self.hits += 1
            self.replays += 1
            self.replays_by_mode[mode] += 1

    def add_entry(self, mode: str, hits: Mapping[int, int], rebinds: Mapping[str, int],
                  copies: Mapping[str, int], executables: Optional[Mapping[str, float]] = None) -> None:
        """What one entry counts itself: its fast paths' hits ({real rows: calls}, each a replay of a
        graph that existed), its zero-copy binds and copies per argument, and the executables its binder
        made (``{"made", "seconds", "bytes", "repointed_calls"}``)."""
        executables = executables or {}
        with self._lock:
            self.executables_made += int(executables.get("made", 0))
            self.executable_instantiate_s += float(executables.get("seconds", 0.0))
            self.executable_bytes_made += int(executables.get("bytes", 0))
            self.repointed_calls += int(executables.get("repointed_calls", 0))
            for rows, calls in hits.items():
                self.hits += calls
                self.replays += calls
                self.replays_by_mode[mode] += calls
                self.batch_sizes.add(rows, calls)
            self.rebinds_by_argument.update(rebinds)
            self.copies_by_argument.update(copies)

    def copy(self) -> CUDAGraphStats:
        """A copy whose counters are its own (``reset`` on it resets nobody else's)."""
        with self._lock:
            made = dataclasses.replace(self, _lock=threading.Lock(), _reset_source=None)
            for field in dataclasses.fields(self):
                value = getattr(self, field.name)
                if isinstance(value, (dict, SizeHistogram)):
                    setattr(made, field.name, type(value)(value) if not isinstance(value, SizeHistogram)
                            else SizeHistogram(dict(value.items())))
            return made

    def record_first_replay(self, mode: str) -> None:
        """A call that captured its graph (a miss) and then replayed it for its result."""
        with self._lock:
            self.misses += 1
            self.replays += 1
            self.replays_by_mode[mode] += 1

    def record_eager_miss(self) -> None:
        """A call that ran the function as it is for its result while a graph took its key: the call
        that captured it, or a key's first padded call, which checks the outputs' batch axis
        (``cache/first_call.py``). A miss, neither a replay nor a fallback."""
        with self._lock:
            self.misses += 1

    def record_capture(self, mode: str, seconds: float, cost: Optional[GraphCost] = None) -> None:
        """A graph was captured (by a call, a warm-up or the registry API); not a call by itself. ``cost``:
        what its capture cost, kept per key (a re-capture's replaces the last)."""
        with self._lock:
            self.captures += 1
            self.capture_time_s += seconds
            self.captures_by_mode[mode] += 1
            if cost is not None:
                costs = self.graph_costs
                costs.pop(cost.label, None)  # the latest capture last: the oldest key goes first
                costs[cost.label] = cost
                while len(costs) > MAX_GRAPH_COSTS:
                    del costs[next(iter(costs))]

    def costs(self) -> list[GraphCost]:
        """Each key's last capture cost, by mode, then size."""
        with self._lock:
            return _in_order(self.graph_costs.values())

    def record_recapture(self, reason: RecaptureReason, detail: Optional[str] = None) -> None:
        """A key was captured again because something it was captured with changed."""
        with self._lock:
            self.recaptures_by_reason[reason.value] += 1
            if detail:
                self.last_detail_by_reason[reason.value] = detail

    def record_fallback(self, reason: FallbackReason, mode: str = "NONE", detail: Optional[str] = None) -> None:
        """A miss that ran the function eagerly: the reason's code, and this occurrence's detail."""
        with self._lock:
            self.misses += 1
            self.fallbacks_by_reason[reason.value] += 1
            self.fallbacks_by_mode[mode] += 1
            if detail:
                self.last_detail_by_reason[reason.value] = detail

    def record_batch_sizes(self, size: int, calls: int = 1) -> None:
        """``calls`` calls with ``size`` real rows (the traffic ``plan-sizes`` plans from)."""
        with self._lock:
            self.batch_sizes.add(size, calls)

    def record_pdl(self, summary: Any) -> None:
        """What programmatic dependent launch did to a new graph (``Recording.pdl``; None: nothing)."""
        if summary is None:
            return
        with self._lock:
            self.pdl_edges_converted += summary.converted
            self.pdl_edges_kept_by_reason.update(summary.kept)

    def record_baked_upload(self, call: str, nbytes: int) -> None:
        with self._lock:
            self.baked_uploads[call] = nbytes

    def record_routed_call(self, call: str) -> None:
        with self._lock:
            self.routed_calls[call] += 1

    def record_capture_failure(self) -> None:
        with self._lock:
            self.capture_failures += 1

    def record_eviction(self, reason: EvictionReason, detail: Optional[str] = None) -> None:
        with self._lock:
            self.evictions += 1
            self.evictions_by_reason[reason.value] += 1
            if detail:
                self.last_detail_by_reason[reason.value] = detail

    def detail(self, reason: str) -> str:
        """The last detail recorded for a reason code (its text when none was)."""
        with self._lock:
            known = self.last_detail_by_reason.get(str(reason))
        return known if known else _text_of(str(reason))

    def merge(self, other: CUDAGraphStats) -> None:
        """Add ``other``'s counters to these (totals over several functions)."""
        with self._lock:
            for field in dataclasses.fields(self):
                if field.name in ("_lock", "_reset_source"):
                    continue
                mine, theirs = getattr(self, field.name), getattr(other, field.name)
                if isinstance(mine, dict):  # a Counter adds counts; the detail table keeps the newer
                    mine.update(theirs)
                else:
                    setattr(self, field.name, mine + theirs)

    def reset(self) -> None:
        """Every counter to zero; on statistics a store gave (``stats()``), that store's counts too."""
        source = self._reset_source
        if source is not None:
            source()
        with self._lock:
            for field in dataclasses.fields(self):
                current = getattr(self, field.name)
                if isinstance(current, dict):
                    current.clear()
                elif field.name not in ("_lock", "_reset_source"):
                    factory = field.default_factory
                    default = factory() if factory is not dataclasses.MISSING else field.default
                    setattr(self, field.name, default)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for logs, JSON and the CLI."""
        with self._lock:
            return {
                "calls": self.calls,
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": round(self.hit_rate(), 6),
                "captures": self.captures,
                "replays": self.replays,
                "evictions": self.evictions,
                "capture_failures": self.capture_failures,
                "fallbacks": self.fallbacks,
                "capture_time_s": round(self.capture_time_s, 6),
                "evictions_by_reason": dict(self.evictions_by_reason),
                "fallbacks_by_reason": dict(self.fallbacks_by_reason),
                "captures_by_mode": dict(self.captures_by_mode),
                "replays_by_mode": dict(self.replays_by_mode),
                "fallbacks_by_mode": dict(self.fallbacks_by_mode),
                "recaptures_by_reason": dict(self.recaptures_by_reason),
                "pdl_edges_converted": self.pdl_edges_converted,
                "pdl_edges_kept_by_reason": dict(self.pdl_edges_kept_by_reason),
                "rebinds_by_argument": {k: v for k, v in self.rebinds_by_argument.items() if v},
                "copies_by_argument": {k: v for k, v in self.copies_by_argument.items() if v},
                "executables_made": self.executables_made,
                "executable_instantiate_s": round(self.executable_instantiate_s, 6),
                "executable_bytes_made": self.executable_bytes_made,
                "repointed_calls": self.repointed_calls,
                "last_detail_by_reason": dict(self.last_detail_by_reason),
                "baked_uploads": dict(self.baked_uploads),
                "routed_calls": dict(self.routed_calls),
                "graph_costs": [cost.to_dict() for cost in _in_order(self.graph_costs.values())],
            }


def _in_order(costs: Iterable[GraphCost]) -> list[GraphCost]:
    return sorted(costs, key=lambda c: (c.mode, c.size, c.seq_len or 0, c.signature))


def _text_of(code: str) -> str:
    for kind in (FallbackReason, EvictionReason, RecaptureReason):
        try:
            return kind(code).text
        except ValueError:
            continue
    return code
