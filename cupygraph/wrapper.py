"""vLLM-style ``CUDAGraphWrapper``: capture/replay driven by the forward context, no input copies."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from .backends import Backend, select_backend
from .config import CUDAGraphMode
from .context import get_forward_context
from .descriptor import BatchDescriptor
from .errors import InputMismatchError
from .reasons import EvictionReason, FallbackReason
from .registry import CUDAGraphEntry, GraphKey
from .stats import CUDAGraphStats

logger = logging.getLogger("cupygraph")


@dataclasses.dataclass(frozen=True)
class CUDAGraphOptions:
    """Options of ``CUDAGraphWrapper``.

    debug_log_enable: log captures and evictions at INFO instead of DEBUG.
    gc_disable: freeze the garbage collector during capture.
    weak_ref_output: return the static outputs without holding extra references for the caller
        (the wrapper keeps them for replay; they are overwritten by the next replay).
    """

    debug_log_enable: bool = True
    gc_disable: bool = False
    weak_ref_output: bool = True
    debug: bool = False


class CUDAGraphWrapper:
    """Wraps a runnable to capture and replay it under the forward context (vLLM semantics).

    Workflow of a call:
      1. Read the forward context (``cudagraph_context``): runtime mode and batch descriptor.
      2. If the context's mode is not this wrapper's runtime mode (or is NONE), call the runnable.
      3. Otherwise, on the first sight of the descriptor, capture the runnable with these exact
         arguments; afterwards replay that graph.

    Contract: the wrapper does not copy inputs and stores no persistent input buffers: the caller
    must pass the same arrays (same addresses) for a descriptor on every replay, writing new data
    into them in place. In debug mode the addresses are checked and a mismatch raises listing the
    expected and actual addresses. Outputs are the graph's static buffers, overwritten by the next
    replay of the same descriptor.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        options: Optional[CUDAGraphOptions] = None,
        max_cached_graphs: Optional[int] = None,
        backend: Optional[Backend] = None,
    ):
        runtime_mode = CUDAGraphMode.parse(runtime_mode)
        if runtime_mode not in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
            raise ValueError(f"CUDAGraphWrapper runtime_mode must be FULL or PIECEWISE, got {runtime_mode.name}")
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.options = options or CUDAGraphOptions()
        self.max_cached_graphs = max_cached_graphs
        self.backend = backend or select_backend("auto")
        self._entries: OrderedDict[BatchDescriptor, CUDAGraphEntry] = OrderedDict()
        self._stats = CUDAGraphStats()
        self._lock = threading.RLock()

    def __getattr__(self, key: str) -> Any:
        # Only called for attributes the wrapper lacks: pass them through to the runnable.
        runnable = self.__dict__.get("runnable")
        if runnable is None:
            raise AttributeError(key)
        return getattr(runnable, key)

    def unwrap(self) -> Callable[..., Any]:
        return self.runnable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = get_forward_context()
        if context.mode is not self.runtime_mode or context.descriptor is None:
            return self.runnable(*args, **kwargs)
        descriptor = context.descriptor
        with self._lock:
            entry = self._entries.get(descriptor)
            if entry is None:
                return self._capture(descriptor, args, kwargs)
            self._entries.move_to_end(descriptor)
            if self.options.debug:
                self._check_addresses(entry, args)
            return self._replay(entry)

    def _log(self, message: str, *args: Any) -> None:
        logger.log(logging.INFO if self.options.debug_log_enable else logging.DEBUG, message, *args)

    def _capture(self, descriptor: BatchDescriptor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        start = time.perf_counter()
        recording = self.backend.capture(
            self.runnable, args, kwargs, num_warmups=0, capture_mode="relaxed", gc_freeze=self.options.gc_disable,
            piecewise=self.runtime_mode is CUDAGraphMode.PIECEWISE,
        )
        seconds = time.perf_counter() - start
        entry = CUDAGraphEntry(
            GraphKey(descriptor, self.runtime_mode), recording, self.backend, [],
            self._get_input_addresses(args), output_mode="view", capture_time=seconds,
        )
        self._cache_entry(descriptor, entry)
        self._stats.record_capture(self.runtime_mode.name, seconds)
        self._stats.record_first_replay(self.runtime_mode.name)
        self._log("CUDAGraphWrapper captured %s (%s) in %.2f ms", descriptor, self.runtime_mode.name, 1e3 * seconds)
        entry.launch()
        return recording.outputs

    def _replay(self, entry: CUDAGraphEntry) -> Any:
        self.backend.order_after_last_use()
        entry.launch()
        self._stats.record_hit(self.runtime_mode.name)
        return entry.cudagraph.outputs

    def _cache_entry(self, descriptor: BatchDescriptor, entry: CUDAGraphEntry) -> None:
        self._entries[descriptor] = entry
        while self.max_cached_graphs is not None and len(self._entries) > self.max_cached_graphs:
            self._evict_lru()

    def _evict_lru(self) -> None:
        descriptor, entry = self._entries.popitem(last=False)
        entry.release()
        self._stats.record_eviction(EvictionReason.MAX_CACHED_GRAPHS,
                                    f"max_cached_graphs={self.max_cached_graphs} reached")
        self._log("CUDAGraphWrapper evicted %s", descriptor)
        if not self._entries:
            self.backend.release_memory()

    def _get_input_addresses(self, args: tuple[Any, ...]) -> tuple[int, ...]:
        return tuple(self.backend.address(a) for a in args if self.backend.is_array(a))

    def _check_addresses(self, entry: CUDAGraphEntry, args: tuple[Any, ...]) -> None:
        actual = self._get_input_addresses(args)
        if actual != entry.input_addresses:
            raise InputMismatchError(
                f"CUDAGraphWrapper replay for {entry.key.descriptor}: input addresses changed since capture; "
                f"expected {[hex(a) for a in entry.input_addresses]}, got {[hex(a) for a in actual]}. "
                "Write new data into the captured arrays in place instead of passing new arrays."
            )

    def get_cached_descriptors(self) -> list[BatchDescriptor]:
        with self._lock:
            return list(self._entries)

    def stats(self) -> CUDAGraphStats:
        return self._stats

    def clear(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.release()
            self._entries.clear()
            self.backend.release_memory()


class AdaptiveCUDAGraphWrapper(CUDAGraphWrapper):
    """A ``CUDAGraphWrapper`` that captures only hot shapes and evicts cold ones first.

    Beyond the base wrapper: a descriptor is captured once it has been seen ``capture_after``
    times (colder ones call the runnable directly); eviction (``max_cached_graphs`` or
    ``memory_budget`` bytes) takes the entry with the fewest replays, and never one with at least
    ``min_replays_to_keep`` replays while a colder entry exists; ``prewarm`` captures shapes ahead
    of traffic.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        options: Optional[CUDAGraphOptions] = None,
        max_cached_graphs: Optional[int] = None,
        min_replays_to_keep: int = 0,
        *,
        capture_after: int = 2,
        memory_budget: Optional[int] = None,
        backend: Optional[Backend] = None,
    ):
        super().__init__(runnable, runtime_mode, options, max_cached_graphs, backend)
        if capture_after < 1:
            raise ValueError(f"capture_after must be at least 1, got {capture_after}")
        self.min_replays_to_keep = min_replays_to_keep
        self.capture_after = capture_after
        self.memory_budget = memory_budget
        self._seen: Counter[BatchDescriptor] = Counter()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = get_forward_context()
        if context.mode is self.runtime_mode and context.descriptor is not None:
            with self._lock:
                self._seen[context.descriptor] += 1
                cold = context.descriptor not in self._entries and self._seen[context.descriptor] < self.capture_after
            if cold:
                self._stats.record_fallback(
                    FallbackReason.COLD_KEY, context.mode.name,
                    f"cold shape {context.descriptor}: seen fewer than capture_after={self.capture_after} times",
                )
                return self.runnable(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def _cache_entry(self, descriptor: BatchDescriptor, entry: CUDAGraphEntry) -> None:
        self._entries[descriptor] = entry
        while self.max_cached_graphs is not None and len(self._entries) > self.max_cached_graphs:
            self._evict_lru()
        while self.memory_budget is not None and len(self._entries) > 1 and self._held_bytes() > self.memory_budget:
            self._evict_lru(EvictionReason.MEMORY_BUDGET, f"memory_budget={self.memory_budget} bytes reached")

    def _held_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def _evict_lru(  # the adaptive wrapper also evicts for the memory budget
        self, reason: EvictionReason = EvictionReason.MAX_CACHED_GRAPHS, detail: Optional[str] = None,
    ) -> None:
        newest = next(reversed(self._entries))
        candidates = [d for d in self._entries if d != newest] or [newest]
        keep = self.min_replays_to_keep
        cold = [d for d in candidates if self._entries[d].replay_count < keep] if keep > 0 else candidates
        pool = cold or candidates
        # Fewest replays first; among equals the least recently used (dict order).
        victim = min(pool, key=lambda d: self._entries[d].replay_count)
        entry = self._entries.pop(victim)
        entry.release()
        self._stats.record_eviction(reason, detail or f"max_cached_graphs={self.max_cached_graphs} reached")
        self._log("AdaptiveCUDAGraphWrapper evicted %s (%d replays)", victim, entry.replay_count)
        if not self._entries:
            self.backend.release_memory()

    def get_hot_shapes(self, top_k: int = 10) -> list[tuple[BatchDescriptor, int]]:
        """The ``top_k`` most often seen descriptors with their counts."""
        with self._lock:
            return self._seen.most_common(top_k)

    def prewarm(
        self, shapes: Iterable[Union[int, BatchDescriptor]], dummy_fn: Callable[[BatchDescriptor], Any]
    ) -> int:
        """Capture each shape now; ``dummy_fn(descriptor)`` returns the (persistent) arguments.

        The arguments may be a tuple (positional) or a single array. Returns how many were captured.
        """
        from .context import cudagraph_context

        captured = 0
        for shape in shapes:
            descriptor = shape if isinstance(shape, BatchDescriptor) else BatchDescriptor(int(shape))
            if descriptor in self._entries:
                continue
            args = dummy_fn(descriptor)
            args = args if isinstance(args, tuple) else (args,)
            with cudagraph_context(self.runtime_mode, descriptor), self._lock:
                self._capture(descriptor, args, {})
            captured += 1
        return captured
