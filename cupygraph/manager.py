"""``CUDAGraphManager``: the seed's high-level interface over one registry and one dispatcher."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .config import CUDAGraphConfig, CUDAGraphMode, apply_env_overrides, graphs_disabled_by_env
from .descriptor import BatchDescriptor
from .dispatcher import CudagraphDispatcher
from .errors import CupyGraphError, InputMismatchError
from .jit import ConfigLike, GraphedFunction, resolve_config
from .key import Namespace
from .registry import CUDAGraphEntry, CUDAGraphRegistry
from .stats import CUDAGraphStats


class CUDAGraphManager:
    """Capture and replay by batch size and sequence length, for code that manages its own loop.

    Contract: ``execute_or_capture`` copies ``inputs`` (batched along axis 0) into static buffers
    padded to the capture size and returns outputs cut to ``batch_size`` rows, owned by the caller
    under ``output_mode="copy"``. All functions given to one manager share its registry (one memory
    pool, one eviction budget) and its statistics; each function gets its own keys.
    """

    def __init__(self, config: ConfigLike = None):
        self._lock = threading.Lock()
        self._functions: dict[int, tuple[Callable[..., Any], GraphedFunction]] = {}
        self._build(resolve_config(config), previous=None)

    def _build(self, config: CUDAGraphConfig, previous: Optional[CUDAGraphRegistry]) -> None:
        """Make the registry and dispatcher ``config`` describes (keeping ``previous``'s backend and stats)."""
        registry = CUDAGraphRegistry(config, backend=None if previous is None else previous.backend)
        if previous is not None:
            registry.stats().merge(previous.stats())
        dispatcher = CudagraphDispatcher(config, registry=registry)
        dispatcher.initialize_cudagraph_keys(config.mode, config.uniform_decode_query_len)
        with self._lock:
            self.config, self.registry, self.dispatcher = config, registry, dispatcher
            # Graphed functions hold the old registry and dispatcher: they are made again on next use.
            self._functions.clear()

    @property
    def mode(self) -> CUDAGraphMode:
        return self.config.mode

    @mode.setter
    def mode(self, value: Any) -> None:
        """Switch modes: the config is derived anew, graphs of the old mode are dropped, and the
        registry and dispatcher are rebuilt from the new config (statistics carry over).
        ``CUPYGRAPH_DISABLE`` still wins: under it the mode stays NONE."""
        config = apply_env_overrides(self.config.replace(mode=CUDAGraphMode.parse(value)))
        previous = self.registry
        previous.clear()
        self._build(config, previous)

    def is_enabled(self) -> bool:
        return self.config.mode.has_graphs() and not graphs_disabled_by_env()

    def get_mode_for_batch(
        self, batch_size: int, seq_len: Optional[int] = None, uniform_decode: bool = False
    ) -> CUDAGraphMode:
        """The runtime mode a batch would run in (NONE when it would run eagerly)."""
        if not self.is_enabled():
            return CUDAGraphMode.NONE
        mode, _ = self.dispatcher.dispatch(BatchDescriptor(batch_size, uniform_decode=uniform_decode, seq_len=seq_len))
        if mode is not CUDAGraphMode.NONE and not self.config.should_use_cudagraph(batch_size, seq_len):
            return CUDAGraphMode.NONE
        return mode

    def should_capture(self, batch_size: int, seq_len: Optional[int] = None) -> bool:
        """True when a batch of this size would use a graph that is not captured yet."""
        mode = self.get_mode_for_batch(batch_size, seq_len)
        if mode is CUDAGraphMode.NONE:
            return False
        key = self.registry.make_key(batch_size, seq_len, mode)
        return key is None or not self.registry.has_descriptor(key.descriptor, mode)

    def capture_graph(
        self,
        batch_size: int,
        seq_len: Optional[int],
        capture_fn: Callable[..., Any],
        input_shapes: Sequence[Any],
        output_shapes: Optional[Sequence[Sequence[int]]] = None,
        inputs: Optional[Sequence[Any]] = None,
    ) -> CUDAGraphEntry:
        """Capture ``capture_fn(*inputs)`` for this batch size (see ``CUDAGraphRegistry.capture``)."""
        mode = self.get_mode_for_batch(batch_size, seq_len)
        if mode is CUDAGraphMode.NONE:
            raise CupyGraphError(
                f"batch_size={batch_size}, seq_len={seq_len} runs eagerly under mode {self.config.mode.name} "
                f"(largest capture size {self.config.largest_capture_size}); nothing to capture"
            )
        return self.registry.capture(
            batch_size, seq_len, capture_fn, input_shapes, output_shapes, inputs=inputs, mode=mode
        )

    def replay_graph(self, batch_size: int, seq_len: Optional[int], inputs: Sequence[Any]) -> Any:
        """Replay the graph captured by ``capture_graph`` for this batch size on ``inputs``."""
        mode = self.get_mode_for_batch(batch_size, seq_len)
        entry = self.registry.get(batch_size, seq_len, mode=mode)
        if entry is None:
            raise CupyGraphError(
                f"no graph captured for batch_size={batch_size}, seq_len={seq_len}; call capture_graph first "
                f"or use execute_or_capture"
            )
        self.registry.stats().record_hit(mode.name)
        return entry.replay(list(inputs))

    def execute_or_capture(
        self,
        batch_size: int,
        seq_len: Optional[int],
        execute_fn: Callable[..., Any],
        inputs: Sequence[Any],
        input_shapes: Optional[Sequence[Any]] = None,
        output_shapes: Optional[Sequence[Sequence[int]]] = None,
    ) -> Any:
        """Run ``execute_fn(*inputs)``: replay its graph for this batch, capturing it on first use.

        Batches that cannot use a graph run eagerly (counted in the stats with the reason).
        ``input_shapes`` / ``output_shapes``, when given, are checked against the call.
        """
        inputs = tuple(inputs)
        if input_shapes is not None:
            for i, (array, shape) in enumerate(zip(inputs, input_shapes)):
                if tuple(array.shape) != tuple(shape):
                    raise InputMismatchError(f"input {i} has shape {tuple(array.shape)}, expected {tuple(shape)}")
        for i, array in enumerate(inputs):
            if getattr(array, "shape", (batch_size,))[:1] != (batch_size,):
                raise InputMismatchError(
                    f"input {i} has {getattr(array, 'shape', None)} but batch_size={batch_size}; inputs are "
                    f"batched along axis 0"
                )
        graphed = self._graphed(execute_fn, len(inputs))
        result = graphed.call_with_descriptor(BatchDescriptor(batch_size, seq_len=seq_len), *inputs)
        if output_shapes is not None:
            outs = result if isinstance(result, (tuple, list)) else (result,)
            got = [tuple(o.shape) for o in outs]
            if got != [tuple(s) for s in output_shapes]:
                raise InputMismatchError(
                    f"execute_fn returned shapes {got}, expected {list(map(tuple, output_shapes))}")
        return result

    def _graphed(self, fn: Callable[..., Any], n_inputs: int) -> GraphedFunction:
        with self._lock:
            known = self._functions.get(id(fn))
            if known is None or known[0] is not fn or known[1].batch_argnums != tuple(range(n_inputs)):
                graphed = GraphedFunction(
                    fn, batch_argnums=tuple(range(n_inputs)), registry=self.registry,
                    dispatcher=self.dispatcher, namespace=Namespace(getattr(fn, "__name__", type(fn).__name__), id(fn)),
                )
                self._functions[id(fn)] = (fn, graphed)
                return graphed
            return known[1]

    def stats(self) -> CUDAGraphStats:
        return self.registry.stats()

    def clear(self) -> None:
        """Drop every graph (statistics are kept)."""
        self.registry.clear()
        with self._lock:
            for _, graphed in self._functions.values():
                graphed.clear()
