"""Runtime dispatch: map each batch to a runtime mode and the padded key a graph serves (vLLM v1)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional

from .config import CUDAGraphConfig, CUDAGraphMode
from .descriptor import BatchDescriptor
from .policy import DefaultDispatchPolicy, DispatchPolicy
from .sizes import decode_capture_sizes, pad_to_capture_size
from .stats import CUDAGraphStats, DispatchStats

if TYPE_CHECKING:
    from .registry import CUDAGraphRegistry, RegisteredGraph

logger = logging.getLogger("cupygraph")

# The seed's DispatchMode: one mode enum in the project.
DispatchMode = CUDAGraphMode

_RUNTIME_GRAPH_MODES = (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)


class CudagraphDispatcher:
    """Decide, per batch, the runtime mode (FULL, PIECEWISE, NONE) and the padded descriptor.

    Follows vLLM's v1 ``CudagraphDispatcher``:

    1. ``cudagraph_keys`` holds one set of ``BatchDescriptor`` per runtime graph mode; the keys are
       the only source of truth for what can be captured or replayed. ``initialize_cudagraph_keys``
       fills them from the config's capture sizes (and ``seq_len_buckets``); until it has run,
       every batch dispatches to NONE.
    2. ``dispatch`` pads the batch to the smallest capture size (and its sequence length to its
       bucket), then tries the exact FULL key, the relaxed FULL key (no request count, not
       uniform) and the relaxed PIECEWISE key; cascade attention rules FULL out.
    3. The policy may veto the graph or choose between the modes that have a key.

    Contract: the dispatcher only decides. It owns no buffers; callers trust the returned
    descriptor to capture or replay (mode FULL/PIECEWISE) or run eagerly (NONE). Without
    ``seq_len_buckets`` the sequence length is not part of the key and is dropped. Thread-safe.
    """

    def __init__(
        self,
        config: Optional[CUDAGraphConfig] = None,
        policy: Optional[DispatchPolicy] = None,
        registry: Optional[CUDAGraphRegistry] = None,
    ):
        self.config = config if config is not None else CUDAGraphConfig()
        self.policy = policy if policy is not None else DefaultDispatchPolicy.from_config(self.config)
        self._registry = registry
        self.cudagraph_keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {
            CUDAGraphMode.PIECEWISE: set(),
            CUDAGraphMode.FULL: set(),
        }
        self.keys_initialized = False
        self.cudagraph_mode = self.config.mode
        self.uniform_decode_query_len = self.config.uniform_decode_query_len
        # Sizes of the FULL uniform-decode keys, which uniform-decode batches are padded to.
        self._decode_sizes: tuple[int, ...] = ()
        self.dispatch_stats = DispatchStats()
        # FULL keys that exist only because a graph was registered; clear_cache drops them again.
        self._registered_only: set[BatchDescriptor] = set()
        self._lock = threading.RLock()

    # -- keys ----------------------------------------------------------------------------------

    @property
    def registry(self) -> CUDAGraphRegistry:
        """The ``CUDAGraphRegistry`` (created from the config on first use)."""
        with self._lock:
            if self._registry is None:
                from .registry import CUDAGraphRegistry

                self._registry = CUDAGraphRegistry(self.config)
            return self._registry

    def add_cudagraph_key(self, runtime_mode: CUDAGraphMode, batch_descriptor: BatchDescriptor) -> None:
        if runtime_mode not in _RUNTIME_GRAPH_MODES:
            name = getattr(runtime_mode, "name", repr(runtime_mode))
            raise ValueError(f"cudagraph keys are added for PIECEWISE or FULL only, got runtime_mode={name}")
        with self._lock:
            self.cudagraph_keys[runtime_mode].add(batch_descriptor)

    def _seq_axes(self) -> list[Optional[int]]:
        buckets = self.config.seq_len_buckets
        return [None, *buckets] if buckets else [None]

    def initialize_cudagraph_keys(self, cudagraph_mode: CUDAGraphMode, uniform_decode_query_len: int) -> None:
        """Add the keys ``cudagraph_mode`` captures, for every capture size (and seq_len bucket).

        Mixed batches get ``BatchDescriptor(s)`` (and ``BatchDescriptor(s, seq_len=b)`` per
        bucket) under the mixed mode. Separate-routine modes with a FULL decode mode also get
        uniform-decode keys ``BatchDescriptor(s, s // q, uniform_decode=True)``, ``q =
        uniform_decode_query_len``, for the capture sizes rounded up to multiples of ``q`` (vLLM's
        rule; the config already rounds its sizes when its own query length is ``q``) up to
        ``q * max_num_reqs``, so uniform-decode batches pad to whole requests and replay FULL.
        """
        cudagraph_mode = CUDAGraphMode.parse(cudagraph_mode)
        q = uniform_decode_query_len
        if isinstance(q, bool) or not isinstance(q, int) or q < 1:
            raise ValueError(f"uniform_decode_query_len must be a positive integer, got {q!r}")
        sizes = self.config.cudagraph_capture_sizes
        seq_axes = self._seq_axes()
        with self._lock:
            self.cudagraph_mode = cudagraph_mode
            self.uniform_decode_query_len = q
            mixed = cudagraph_mode.mixed_mode()
            if mixed in _RUNTIME_GRAPH_MODES:
                for s in sizes:
                    for seq in seq_axes:
                        self.add_cudagraph_key(mixed, BatchDescriptor(s, seq_len=seq))
            self._decode_sizes = ()
            if cudagraph_mode.separate_routine() and cudagraph_mode.decode_mode() is CUDAGraphMode.FULL:
                self._decode_sizes = decode_capture_sizes(sizes, q, self.config.max_num_reqs)
                for s in self._decode_sizes:
                    for seq in seq_axes:
                        self.add_cudagraph_key(
                            CUDAGraphMode.FULL, BatchDescriptor(s, s // q, uniform_decode=True, seq_len=seq)
                        )
            self.keys_initialized = True

    # -- dispatch ------------------------------------------------------------------------------

    def _pad(self, batch: BatchDescriptor) -> Optional[BatchDescriptor]:
        """``batch`` padded to its capture size and bucket; None when above the largest.

        A uniform-decode batch is padded to the smallest decode size (a multiple of the query
        length) and keeps its uniformity, with the request count of the padded size; one above
        the decode sizes is padded like a mixed batch (it can only replay a relaxed key).
        """
        seq_len = None
        if batch.seq_len is not None and self.config.seq_len_buckets:
            seq_len = self.config.get_padded_seq_len(batch.seq_len)
            if seq_len is None:
                return None
        q = self.uniform_decode_query_len
        if batch.uniform_decode and batch.num_tokens % q == 0:
            decode = pad_to_capture_size(batch.num_tokens, self._decode_sizes)
            if decode is not None:
                return BatchDescriptor(decode, decode // q, True, seq_len)
        padded = self.config.get_padded_batch_size(batch.num_tokens)
        if padded is None:
            return None
        return BatchDescriptor(padded, batch.num_reqs, batch.uniform_decode, seq_len)

    def policy_key(self, batch_descriptor: BatchDescriptor) -> Optional[BatchDescriptor]:
        """The padded, relaxed key policies see for this batch; None when it is above the largest."""
        padded = self._pad(batch_descriptor)
        return None if padded is None else padded.relaxed()

    def dispatch(
        self, batch_descriptor: BatchDescriptor, use_cascade_attn: bool = False
    ) -> tuple[CUDAGraphMode, Optional[BatchDescriptor]]:
        """The runtime mode and the padded descriptor to capture/replay under, or (NONE, None).

        The descriptor returned may be more general than the input (a uniform batch dispatched
        to a relaxed key) and is padded to a capture size.
        """
        with self._lock:
            mode, key = self._decide(batch_descriptor, use_cascade_attn)
            stats = self.dispatch_stats
            stats.total += 1
            if mode is CUDAGraphMode.FULL:
                stats.full += 1
            elif mode is CUDAGraphMode.PIECEWISE:
                stats.piecewise += 1
            else:
                stats.none += 1
            if key is not None and (
                key.num_tokens != batch_descriptor.num_tokens
                or (key.seq_len is not None and key.seq_len != batch_descriptor.seq_len)
            ):
                stats.padded += 1
            return mode, key

    def _decide(
        self, batch: BatchDescriptor, use_cascade_attn: bool
    ) -> tuple[CUDAGraphMode, Optional[BatchDescriptor]]:
        none = (CUDAGraphMode.NONE, None)
        if not self.keys_initialized or not self.cudagraph_mode.has_graphs():
            return none
        sizes = self.config.cudagraph_capture_sizes
        if not sizes:
            return none
        padded = self._pad(batch)
        if padded is None:
            self.dispatch_stats.above_largest += 1
            logger.debug("dispatch %s: above the largest capture size %d or seq_len bucket; eager",
                         batch, sizes[-1])
            return none
        relaxed = padded.relaxed()
        full_keys = self.cudagraph_keys[CUDAGraphMode.FULL]
        piecewise_keys = self.cudagraph_keys[CUDAGraphMode.PIECEWISE]
        # dict order is preference order: FULL before PIECEWISE, as vLLM tries them.
        candidates: dict[CUDAGraphMode, BatchDescriptor] = {}
        if not use_cascade_attn:
            if padded in full_keys:
                candidates[CUDAGraphMode.FULL] = padded
            elif relaxed in full_keys:
                candidates[CUDAGraphMode.FULL] = relaxed
        if relaxed in piecewise_keys:
            candidates[CUDAGraphMode.PIECEWISE] = relaxed
        if not candidates:
            logger.debug("dispatch %s: no FULL or PIECEWISE key for %s; eager", batch, padded)
            return none
        if not self.policy.should_use_graph(relaxed, True):
            logger.debug("dispatch %s: %r vetoed the graph; eager", batch, self.policy)
            return none
        mode = self.policy.select_mode(relaxed, list(candidates))
        if mode not in candidates:
            logger.debug("dispatch %s: %r chose %s; eager", batch, self.policy, getattr(mode, "name", mode))
            return none
        return mode, candidates[mode]

    def record_latency(self, batch_descriptor: BatchDescriptor, mode: CUDAGraphMode, latency: float) -> None:
        """Forward a measured latency to the policy (if it learns) under the key it decides on."""
        record = getattr(self.policy, "record", None)
        key = self.policy_key(batch_descriptor)
        if record is not None and key is not None:
            record(key, mode, latency)

    # -- the seed's surface --------------------------------------------------------------------

    def register_graph(self, key: BatchDescriptor, graph: Any, input_ptrs: Sequence[int] = ()) -> None:
        """Record that a FULL graph for ``key`` exists (its key becomes dispatchable); the graph
        itself is held by the registry, the one graph cache."""
        with self._lock:
            if key not in self.cudagraph_keys[CUDAGraphMode.FULL]:
                self._registered_only.add(key)
            self.cudagraph_keys[CUDAGraphMode.FULL].add(key)
            self.registry.register_graph(key, graph, input_ptrs)

    @property
    def _graphs(self) -> dict[BatchDescriptor, RegisteredGraph]:
        """The graphs handed to ``register_graph``, as the registry holds them (none without one)."""
        return {} if self._registry is None else self._registry.registered_graphs()

    def _registry_entry(self, key: BatchDescriptor) -> Any:
        # Scan instead of registry.lookup: a query must not mark an entry as recently used,
        # and must not create the registry (and pick a backend) when none exists yet.
        if self._registry is None:
            return None
        for entry in self._registry.entries():
            if entry.key.descriptor == key:
                return entry
        return None

    def _replay_graph(self, entry: Any) -> None:
        """Launch a FULL graph: a registry entry, or a registered graph object (``launch``/``replay``)."""
        launch = getattr(entry, "launch", None) or getattr(entry, "replay", None)
        if launch is None:
            raise TypeError(f"cannot replay {type(entry).__name__}: it has neither launch() nor replay()")
        launch()

    def _replay_piecewise(self, entry: Any) -> None:
        """Launch a PIECEWISE entry: its graph pieces and eager steps run in order on this stream."""
        mode = getattr(getattr(entry, "key", None), "mode", None)
        if mode is not CUDAGraphMode.PIECEWISE:
            raise ValueError(f"_replay_piecewise needs a PIECEWISE registry entry, got one of mode {mode}")
        entry.launch()

    def has_graph(self, key: BatchDescriptor) -> bool:
        with self._lock:
            return self._registered(key) is not None or self._registry_entry(key) is not None

    def get_graph(self, key: BatchDescriptor) -> Any:
        """The registered graph object for ``key``, else its registry entry, else None."""
        with self._lock:
            registered = self._registered(key)
            return registered.graph if registered is not None else self._registry_entry(key)

    def get_input_ptrs(self, key: BatchDescriptor) -> Optional[tuple[int, ...]]:
        with self._lock:
            registered = self._registered(key)
            return None if registered is None else registered.input_ptrs

    def _registered(self, key: BatchDescriptor) -> Optional[RegisteredGraph]:
        # Without a registry nothing was registered: a query must not create one.
        return None if self._registry is None else self._registry.registered_graph(key)

    def stats(self) -> dict[str, Any]:
        """Dispatch counters, ``graph_ratio`` and the registry's counters in one flat dict."""
        with self._lock:
            data = self.dispatch_stats.to_dict()
            registry_stats = self._registry.stats() if self._registry is not None else CUDAGraphStats()
            data.update(registry_stats.to_dict())
            data["registered_graphs"] = len(self._graphs)
            data["num_keys"] = {mode.name: len(keys) for mode, keys in self.cudagraph_keys.items()}
            return data

    def clear_cache(self) -> None:
        """Drop the registered graphs (and their keys, unless initialisation made them) and the registry's graphs."""
        with self._lock:
            self.cudagraph_keys[CUDAGraphMode.FULL] -= self._registered_only
            self._registered_only.clear()
            if self._registry is not None:
                self._registry.clear()

    def enable_mode(self, mode: CUDAGraphMode) -> None:
        """Re-initialise the keys for ``mode`` (replacing the current ones; registered graphs stay)."""
        mode = CUDAGraphMode.parse(mode)
        with self._lock:
            for keys in self.cudagraph_keys.values():
                keys.clear()
            self.initialize_cudagraph_keys(mode, self.uniform_decode_query_len)
            full_keys = self.cudagraph_keys[CUDAGraphMode.FULL]
            self._registered_only = set(self._graphs) - full_keys
            full_keys.update(self._graphs)

    def disable_mode(self, mode: CUDAGraphMode) -> None:
        """Drop the keys of the runtime modes ``mode`` uses (FULL_AND_PIECEWISE: both)."""
        mode = CUDAGraphMode.parse(mode)
        with self._lock:
            for runtime_mode in _RUNTIME_GRAPH_MODES:
                if mode.has_mode(runtime_mode):
                    self.cudagraph_keys[runtime_mode].clear()
                    if runtime_mode is CUDAGraphMode.FULL:
                        self._registered_only.clear()


@dataclasses.dataclass(frozen=True)
class CompositeDecision:
    """What a ``CompositeDispatcher`` decided; unpacks as ``mode, descriptor, dispatcher_name``.

    ``dispatcher_name`` is None when no dispatcher chose a graph; ``asked`` lists the dispatchers
    consulted, in the order they were asked.
    """

    mode: CUDAGraphMode
    descriptor: Optional[BatchDescriptor]
    dispatcher_name: Optional[str]
    asked: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter((self.mode, self.descriptor, self.dispatcher_name))


class CompositeDispatcher:
    """Ask several dispatchers in descending priority; the first graph decision wins.

    Equal priorities are asked in the order they were added. A member is anything with
    ``dispatch(descriptor, use_cascade_attn=False)`` returning ``(mode, descriptor)``
    (a nested ``CompositeDispatcher`` works too). Thread-safe.
    """

    def __init__(self) -> None:
        self._members: list[tuple[int, int, str, Any]] = []
        self._added = 0
        self._lock = threading.Lock()

    def add_dispatcher(self, name: str, dispatcher: Any, priority: int = 0) -> None:
        if not callable(getattr(dispatcher, "dispatch", None)):
            raise TypeError(f"dispatcher {name!r} has no dispatch() method: {type(dispatcher).__name__}")
        with self._lock:
            if any(member[2] == name for member in self._members):
                raise ValueError(f"a dispatcher named {name!r} is already added; remove it first")
            self._members.append((-priority, self._added, name, dispatcher))
            self._added += 1
            self._members.sort(key=lambda member: member[:2])

    def remove_dispatcher(self, name: str) -> None:
        with self._lock:
            kept = [member for member in self._members if member[2] != name]
            if len(kept) == len(self._members):
                raise KeyError(f"no dispatcher named {name!r}; added: {', '.join(self.dispatcher_names) or 'none'}")
            self._members = kept

    @property
    def dispatcher_names(self) -> list[str]:
        """Member names in the order ``dispatch`` asks them."""
        return [member[2] for member in self._members]

    def dispatch(self, key: BatchDescriptor, use_cascade_attn: bool = False) -> CompositeDecision:
        with self._lock:
            members = list(self._members)
        asked: list[str] = []
        for _, _, name, dispatcher in members:
            asked.append(name)
            result = dispatcher.dispatch(key, use_cascade_attn=use_cascade_attn)
            if isinstance(result, CompositeDecision):
                mode, descriptor = result.mode, result.descriptor
            else:
                mode, descriptor = result
            if mode is not CUDAGraphMode.NONE:
                return CompositeDecision(mode, descriptor, name, tuple(asked))
        return CompositeDecision(CUDAGraphMode.NONE, None, None, tuple(asked))
