"""vLLM-style ``CUDAGraphWrapper``: capture/replay driven by the forward context, no input copies.

The wrappers keep no graphs of their own: each holds a ``CUDAGraphRegistry`` (the one graph
cache) built from its config, which decides capture-after, eviction and the memory budget, captures
(one call on a miss: ``find_or_capture``) and counts every call in its statistics. Unlike ``jit``
the wrapper keys a graph by the forward context's descriptor alone and reads every argument where
it is, so it adapts the cache rather than ``jit``. ``AdaptiveCUDAGraphWrapper`` (``adaptive.py``) is
this wrapper with the seed's capture-after and eviction arguments.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Optional, Union, cast

from ..backends import Backend
from ..backends.base import ReplayMismatch
from ..cache import (
    MODE_NONE,
    CaptureRequest,
    CUDAGraphEntry,
    CUDAGraphRegistry,
    CUDAGraphStats,
    Eager,
    GraphKey,
    run_eagerly,
)
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.context import get_forward_context
from ..dispatch.descriptor import BatchDescriptor
from ..errors import InputMismatchError
from ..logs import logger
from ..reasons import EvictionReason
from .options import ConfigLike, resolve_config

_KNOWN_LIMIT = 4096
"""Descriptors a wrapper remembers the entries of (whatever the traffic, memory is bounded)."""


@dataclasses.dataclass(frozen=True)
class CUDAGraphOptions:
    """Options of ``CUDAGraphWrapper`` (vLLM's names; ``wrapper_config`` maps them onto the config).

    debug_log_enable: log captures and evictions at INFO instead of DEBUG.
    gc_disable: freeze the garbage collector during capture: the config's ``gc_freeze`` under
        vLLM's name. None (default) keeps the config's value.
    weak_ref_output: return the static outputs themselves, which the next replay overwrites
        (the config's ``output_mode="view"``; a NumPy scalar the runnable returns stays a scalar);
        False returns copies the caller owns ("copy").
    debug: check on every replay that the arguments are the captured arrays.
    """

    debug_log_enable: bool = True
    gc_disable: Optional[bool] = None
    weak_ref_output: bool = True
    debug: bool = False


def wrapper_config(config: CUDAGraphConfig, options: CUDAGraphOptions, **fields: Any) -> CUDAGraphConfig:
    """The config a wrapper's cache runs: ``config`` with the wrapper's options and the seed's
    keyword arguments (``fields``: None leaves the config's value) written onto its fields.

    The one place the wrappers' names map onto the config's: ``gc_disable`` onto ``gc_freeze``,
    ``weak_ref_output`` onto ``output_mode``. ``num_warmups`` is 0: the wrapper captures on the
    caller's own arrays, where a warm-up would run the runnable (and its in-place writes) once
    more; as in vLLM, warm-ups are the caller's, before it captures.
    """
    changes = {name: value for name, value in fields.items() if value is not None}
    changes["num_warmups"] = 0
    if options.gc_disable is not None:
        changes["gc_freeze"] = options.gc_disable
    changes["output_mode"] = "view" if options.weak_ref_output else "copy"
    changed = {name: value for name, value in changes.items() if getattr(config, name) != value}
    return config.replace(**changed) if changed else config


class CUDAGraphWrapper:
    """Wraps a runnable to capture and replay it under the forward context (vLLM semantics).

    Workflow of a call:
      1. Read the forward context (``cudagraph_context``): runtime mode and batch descriptor.
      2. If the context's mode is not this wrapper's runtime mode (or is NONE), call the runnable.
         Under a config of mode NONE (``CUPYGRAPH_DISABLE`` too) it runs eagerly, counted.
      3. Otherwise ask the graph cache about the descriptor: replay its graph; run the runnable
         eagerly while the descriptor is cold (``capture_after``) or after its capture failed
         (``on_capture_error``); or capture the runnable with these exact arguments, then replay.

    Contract: the wrapper does not copy inputs and stores no persistent input buffers: the caller
    must pass the same arrays (same addresses) for a descriptor on every replay, writing new data
    into them in place. In debug mode the addresses are checked and a mismatch raises listing the
    expected and actual addresses. Outputs are the graph's static buffers, overwritten by the next
    replay of the same descriptor (``weak_ref_output=False``: copies the caller owns). Graphs are
    held in a ``CUDAGraphRegistry`` built from ``config`` (default: the default config), whose
    ``max_cached_graphs``, ``memory_budget``, ``eviction``, ``min_replays_to_keep``,
    ``capture_after``, ``capture_mode``, ``gc_freeze`` and ``on_capture_error`` apply (not
    ``num_warmups``: see ``wrapper_config``); ``max_cached_graphs`` given here overrides the config's.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        options: Optional[CUDAGraphOptions] = None,
        max_cached_graphs: Optional[int] = None,
        *,
        config: ConfigLike = None,
        backend: Optional[Backend] = None,
    ):
        runtime_mode = CUDAGraphMode.parse(runtime_mode)
        if runtime_mode not in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
            raise ValueError(f"CUDAGraphWrapper runtime_mode must be FULL or PIECEWISE, got {runtime_mode.name}")
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.options = options or CUDAGraphOptions()
        self.registry = CUDAGraphRegistry(self._config(config, max_cached_graphs=max_cached_graphs), backend)
        self._name = getattr(runnable, "__name__", type(runnable).__name__)
        # What the replay path uses, looked up once (the registry never replaces them), and the
        # entries the cache gave for descriptors: valid while its generation is unchanged.
        self._family_lock = self.registry.family_lock
        self._stats = self.registry.recorder
        self._order_after_last_use = self.registry.backend.order_after_last_use
        self._static_outputs = self.registry.config.output_mode == "view"
        self._graphs_on = self.registry.config.mode.has_graphs()
        self._known: dict[BatchDescriptor, CUDAGraphEntry] = {}
        self._generation = self.registry.generation

    def _config(self, config: ConfigLike, **fields: Any) -> CUDAGraphConfig:
        return wrapper_config(resolve_config(config), self.options, **fields)

    def __getattr__(self, key: str) -> Any:
        # Only called for attributes the wrapper lacks: pass them through to the runnable.
        runnable = self.__dict__.get("runnable")
        if runnable is None:
            raise AttributeError(key)
        return getattr(runnable, key)

    @property
    def backend(self) -> Backend:
        return self.registry.backend

    @property
    def max_cached_graphs(self) -> Optional[int]:
        return self.registry.config.max_cached_graphs

    def unwrap(self) -> Callable[..., Any]:
        return self.runnable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = get_forward_context()
        descriptor = context.descriptor
        if context.mode is not self.runtime_mode or descriptor is None:
            return self.runnable(*args, **kwargs)
        entry = self._known.get(descriptor)
        if entry is not None:
            with self._family_lock:
                # Checked under the lock: another thread's capture may have evicted the entry.
                if entry.alive:
                    if self.options.debug:
                        self._check_addresses(entry, args)
                    try:
                        out = self._replay(entry)
                    except ReplayMismatch as err:
                        return self._run_eagerly(args, kwargs, self.registry.replay_failed(entry, err, name=self._name))
                    self._stats.record_hit(self.runtime_mode.name)
                    return out
        return self._call_slow(descriptor, args, kwargs)

    def _call_slow(self, descriptor: BatchDescriptor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Ask the graph cache what this call does; remember the entry it gives for the next calls."""
        if not self._graphs_on:
            return self._run_eagerly(args, kwargs, MODE_NONE)  # mode NONE, or CUPYGRAPH_DISABLE
        key = GraphKey(descriptor, self.runtime_mode)
        registry, mode = self.registry, self.runtime_mode.name
        with self._family_lock:
            # Every array is read by address: the request copies nothing in.
            found, captured = registry.find_or_capture(key, CaptureRequest(self.runnable, args, kwargs),
                                                       name=self._name)
            if isinstance(found, CUDAGraphEntry):
                if captured:
                    self._log_capture(found)
                elif self.options.debug:
                    self._check_addresses(found, args)
                try:
                    out = self._replay(found)
                except ReplayMismatch as err:
                    found = registry.replay_failed(found, err, name=self._name)
                else:
                    if captured:
                        self._stats.record_first_replay(mode)
                    else:
                        self._stats.record_hit(mode)
                    self._remember(descriptor, found)
                    return out
        return self._run_eagerly(args, kwargs, found)

    def _remember(self, descriptor: BatchDescriptor, entry: CUDAGraphEntry) -> None:
        # Entries that left the cache since are forgotten here too; the memo stays bounded.
        if self._generation != self.registry.generation or len(self._known) >= _KNOWN_LIMIT:
            self._known.clear()
            self._generation = self.registry.generation
        self._known[descriptor] = entry

    def _run_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any], why: Eager) -> Any:
        with self.registry.instruments.eager(self._name, why.reason.value):
            return run_eagerly(self.runnable, args, kwargs, why, name=self._name, stats=self._stats,
                               raises=self.registry.raises, mode=self.runtime_mode.name)

    def _log(self, message: str, *args: Any) -> None:
        logger.log(logging.INFO if self.options.debug_log_enable else logging.DEBUG, message, *args)

    def _capture(self, key: GraphKey, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Union[CUDAGraphEntry, Eager]:
        """Record the runnable on these very arguments now (``prewarm``): every array is read by address.
        The cache's one miss call, forced past ``capture_after``: a key that failed before stays failed."""
        result, captured = self.registry.find_or_capture(key, CaptureRequest(self.runnable, args, kwargs),
                                                         name=self._name, force=True)
        if captured:
            self._log_capture(cast(CUDAGraphEntry, result))
        return result

    def _log_capture(self, entry: CUDAGraphEntry) -> None:
        self._log("%s captured %s (%s) in %.2f ms", type(self).__name__, entry.key.descriptor, entry.key.mode.name,
                  1e3 * entry.capture_time)

    def _replay(self, entry: CUDAGraphEntry) -> Any:
        """Launch on the captured arrays themselves: nothing to copy in."""
        stream = self._order_after_last_use()
        entry.launch()
        # weak_ref_output: the static outputs themselves, as captured (no slicing: the context's
        # descriptor is the padded size); else copies the caller owns. A NumPy scalar the plain runnable
        # returns is handed back as one (``entry.outputs``), never as the 0-d buffer the next replay rewrites.
        if self._static_outputs and not entry.recording.scalar_outputs:
            return entry.recording.outputs
        return entry.outputs(entry.padded, stream)

    def _cache_entry(self, descriptor: BatchDescriptor, entry: CUDAGraphEntry) -> None:
        """Hold an entry made elsewhere for ``descriptor`` (evicting per the config)."""
        if entry.key.descriptor != descriptor:
            raise ValueError(f"the entry serves {entry.key.descriptor}, not {descriptor}")
        self.registry.add(entry)

    def _evict_lru(self) -> None:
        """Evict the graph the config's eviction policy takes next."""
        if self.registry.evict_one(EvictionReason.REMOVED, "evicted by _evict_lru()"):
            self._log("%s evicted a graph", type(self).__name__)

    def _get_input_addresses(self, args: tuple[Any, ...]) -> tuple[int, ...]:
        backend = self.registry.backend
        return tuple(backend.address(a) for a in args if backend.is_array(a))

    def _check_addresses(self, entry: CUDAGraphEntry, args: tuple[Any, ...]) -> None:
        actual = self._get_input_addresses(args)
        if actual != entry.input_addresses:
            raise InputMismatchError(
                f"CUDAGraphWrapper replay for {entry.key.descriptor}: input addresses changed since capture; "
                f"expected {[hex(a) for a in entry.input_addresses]}, got {[hex(a) for a in actual]}. "
                "Write new data into the captured arrays in place instead of passing new arrays."
            )

    def get_cached_descriptors(self) -> list[BatchDescriptor]:
        """The descriptors with a graph held, least recently used first."""
        return [entry.key.descriptor for entry in sorted(self.registry.entries(), key=lambda e: e.last_used)]

    def stats(self) -> CUDAGraphStats:
        return self.registry.stats()

    def clear(self) -> None:
        """Drop every graph (the memory goes back) and forget failed descriptors; stats are kept."""
        with self._family_lock:
            self.registry.clear()
            self._known.clear()
