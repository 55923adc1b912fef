"""``CudagraphDispatcher``: the seed's dispatcher, a ``Dispatcher`` that also reaches the graph cache.

``cupygraph.dispatch.dispatcher.Dispatcher`` owns the keys and the decision and knows nothing of
graphs; it is the dispatcher of the main path (``jit``, the manager). The seed API let a dispatcher
hold graphs too (``register_graph``, ``has_graph``, ``get_graph``, ``clear_cache``, registry
counters in ``stats()``); that surface has no home of its own and lives here, delegating to the one
graph cache (``CUDAGraphRegistry``), so the dispatch layer never imports the cache layer.
``StreamDispatcher`` is one, as the seed has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..cache import CUDAGraphRegistry, CUDAGraphStats, RegisteredGraph
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor, check_descriptor
from ..dispatch.dispatcher import Dispatcher
from ..dispatch.policy import DispatchPolicy

__all__ = ["CudagraphDispatcher"]


class CudagraphDispatcher(Dispatcher):
    """A ``Dispatcher`` with the seed's graph surface, backed by a ``CUDAGraphRegistry``.

    Graphs handed to ``register_graph`` are held by the registry (the one graph cache); their
    FULL keys become dispatchable, and ``clear_cache`` drops the keys that exist only because of
    them. Thread-safe (the dispatcher's lock guards keys and registry alike).
    """

    def __init__(
        self,
        config: Optional[CUDAGraphConfig] = None,
        policy: Optional[DispatchPolicy] = None,
        registry: Optional[CUDAGraphRegistry] = None,
    ):
        super().__init__(config, policy)
        self._registry = registry
        # FULL keys that exist only because a graph was registered; clear_cache drops them again.
        self._registered_only: set[BatchDescriptor] = set()

    @property
    def registry(self) -> CUDAGraphRegistry:
        """The ``CUDAGraphRegistry`` (created from the config on first use)."""
        with self._lock:
            if self._registry is None:
                self._registry = CUDAGraphRegistry(self.config)
            return self._registry

    def register_graph(self, key: BatchDescriptor, graph: Any, input_ptrs: Sequence[int] = ()) -> None:
        """Record that a FULL graph for ``key`` exists (its key becomes dispatchable); the graph
        itself is held by the registry, the one graph cache."""
        check_descriptor(key, "key")
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
        check_descriptor(key, "key")
        with self._lock:
            return self._registered(key) is not None or self._registry_entry(key) is not None

    def get_graph(self, key: BatchDescriptor) -> Any:
        """The registered graph object for ``key``, else its registry entry, else None."""
        check_descriptor(key, "key")
        with self._lock:
            registered = self._registered(key)
            return registered.graph if registered is not None else self._registry_entry(key)

    def get_input_ptrs(self, key: BatchDescriptor) -> Optional[tuple[int, ...]]:
        check_descriptor(key, "key")
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
        with self._lock:
            super().enable_mode(mode)
            full_keys = self.cudagraph_keys[CUDAGraphMode.FULL]
            self._registered_only = set(self._graphs) - full_keys
            full_keys.update(self._graphs)

    def disable_mode(self, mode: CUDAGraphMode) -> None:
        """Drop the keys of the runtime modes ``mode`` uses (FULL_AND_PIECEWISE: both)."""
        with self._lock:
            super().disable_mode(mode)
            if CUDAGraphMode.parse(mode).has_mode(CUDAGraphMode.FULL):
                self._registered_only.clear()
