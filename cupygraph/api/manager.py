"""``CUDAGraphManager``: the seed's high-level interface, an adapter over ``jit``.

Each function given to a manager becomes a ``GraphedFunction`` on the manager's one registry and
dispatcher (its keys kept apart by a namespace); capturing and replaying are theirs and the
cache's. Capture by batch size checks its inputs and outputs as ``CUDAGraphRegistry.capture`` does
(``seed_inputs``, ``check_output_shapes``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..cache import (
    CUDAGraphEntry,
    CUDAGraphRegistry,
    CUDAGraphStats,
    Namespace,
    check_output_shapes,
    seed_inputs,
)
from ..config.defaults import apply_env_overrides, graphs_disabled_by_env
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.decision import Decision
from ..dispatch.descriptor import BatchDescriptor
from ..dispatch.dispatcher import Dispatcher
from ..errors import CaptureError, CupyGraphError, InputMismatchError
from ..pytree import flatten
from ..reasons import FallbackReason
from .jit import ConfigLike, GraphedFunction, resolve_config
from .shortcuts import Shortcut


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
        # The graph capture_graph made last per (padded descriptor, mode): what replay_graph replays.
        self._captured: dict[tuple[BatchDescriptor, CUDAGraphMode], CUDAGraphEntry] = {}
        self._build(resolve_config(config), previous=None)

    def _build(self, config: CUDAGraphConfig, previous: Optional[CUDAGraphRegistry]) -> None:
        """Make the registry and dispatcher ``config`` describes (keeping ``previous``'s backend and stats)."""
        registry = CUDAGraphRegistry(config, backend=None if previous is None else previous.backend)
        if previous is not None:
            registry.recorder.merge(previous.stats())
        dispatcher = Dispatcher(config)
        dispatcher.initialize_cudagraph_keys(config.mode, config.uniform_decode_query_len)
        with self._lock:
            self.config, self.registry, self.dispatcher = config, registry, dispatcher
            self._stats = registry.recorder  # recorded into per call; reading goes through stats()
            # Graphed functions hold the old registry and dispatcher: they are made again on next use.
            self._functions.clear()
            self._captured.clear()

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

    def decide(self, batch_size: int, seq_len: Optional[int] = None, uniform_decode: bool = False) -> Decision:
        """What this manager does with a batch: the dispatcher's decision (``CUPYGRAPH_DISABLE`` wins).

        A query: it is not counted in the dispatch statistics.
        """
        if not self.is_enabled():
            return Decision.eager(FallbackReason.MODE_NONE)
        if batch_size == 0:
            return Decision.eager(FallbackReason.EMPTY_BATCH)
        batch = BatchDescriptor(batch_size, uniform_decode=uniform_decode, seq_len=seq_len)
        return self.dispatcher.decide(batch, count=False)

    def get_mode_for_batch(
        self, batch_size: int, seq_len: Optional[int] = None, uniform_decode: bool = False
    ) -> CUDAGraphMode:
        """The runtime mode a batch would run in (NONE when it would run eagerly)."""
        return self.decide(batch_size, seq_len, uniform_decode).mode

    def should_capture(self, batch_size: int, seq_len: Optional[int] = None) -> bool:
        """True when a batch of this size would use a graph that no function has captured yet."""
        decision = self.decide(batch_size, seq_len)
        return decision.graphed and not self.registry.has_descriptor(decision.padded, decision.mode)

    def capture_graph(
        self,
        batch_size: int,
        seq_len: Optional[int],
        capture_fn: Callable[..., Any],
        input_shapes: Sequence[Any],
        output_shapes: Optional[Sequence[Sequence[int]]] = None,
        inputs: Optional[Sequence[Any]] = None,
    ) -> CUDAGraphEntry:
        """Capture ``capture_fn(*inputs)`` for this batch now (``capture_after`` does not apply).

        The graph is the one ``execute_or_capture`` with the same function and batch replays.
        ``input_shapes`` gives each input's shape for the real batch (leading axis = batch) or a
        ``(shape, dtype)`` pair (a shape alone: float32); without ``inputs`` the inputs are filled with
        ``pad_value``, with ``inputs`` each must agree with its entry. A malformed entry raises naming it.
        ``output_shapes``, when given, are checked against the outputs for the real batch.
        """
        decision = self.decide(batch_size, seq_len)
        if not decision.graphed:
            raise CupyGraphError(
                f"batch_size={batch_size}, seq_len={seq_len} runs eagerly under mode {self.config.mode.name} "
                f"({decision.explain()}); nothing to capture"
            )
        inputs = seed_inputs(self.registry.backend.xp, input_shapes, batch_size, inputs, self.config.pad_value)
        inputs = self._check_inputs(batch_size, inputs)
        graphed = self._graphed(capture_fn, len(inputs))
        with self.registry.family_lock:
            shortcut = graphed.resolve(inputs, force=True, descriptor=BatchDescriptor(batch_size, seq_len=seq_len))
        if not isinstance(shortcut, Shortcut):
            raise CaptureError(f"cannot capture {getattr(capture_fn, '__name__', 'capture_fn')}() for "
                               f"batch_size={batch_size}, seq_len={seq_len}: {shortcut}")
        entry = shortcut.entry
        check_output_shapes(self.registry, entry, batch_size, output_shapes)
        self._captured[(entry.key.descriptor, entry.key.mode)] = entry
        return entry

    def replay_graph(self, batch_size: int, seq_len: Optional[int], inputs: Sequence[Any]) -> Any:
        """Replay the graph held for this batch on ``inputs``: the one ``capture_graph`` captured
        last for it, else the one graph of a function ``execute_or_capture`` captured for it."""
        decision = self.decide(batch_size, seq_len)
        if not decision.graphed:
            raise CupyGraphError(
                f"batch_size={batch_size}, seq_len={seq_len} runs eagerly ({decision.explain()}); no graph to replay"
            )
        inputs = self._check_inputs(batch_size, inputs)
        with self.registry.family_lock:
            entry = self._entry_for(decision, inputs)
            if entry is None:
                raise CupyGraphError(
                    f"no graph captured for batch_size={batch_size}, seq_len={seq_len}; call capture_graph first "
                    f"or use execute_or_capture"
                )
            out = entry.replay(list(inputs))
        self._stats.record_hit(decision.mode.name)
        self._stats.record_batch_sizes(batch_size)  # a call of the traffic plan-sizes plans from, as every other
        return out

    def _entry_for(self, decision: Decision, inputs: tuple[Any, ...]) -> Optional[CUDAGraphEntry]:
        key = (decision.padded, decision.mode)
        captured = self._captured.get(key)
        if captured is not None and captured.alive:
            return captured
        fits = [e for e in self.registry.entries() if (e.key.descriptor, e.key.mode) == key and _accepts(e, inputs)]
        if len(fits) > 1:
            raise CupyGraphError(
                f"{len(fits)} functions have graphs for {decision.padded} that take these inputs; replay_graph "
                f"cannot tell which one to replay: use execute_or_capture(batch_size, seq_len, fn, inputs)"
            )
        return fits[0] if fits else None

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
        if input_shapes is not None:  # (given inputs, it only checks them)
            inputs = seed_inputs(self.registry.backend.xp, input_shapes, batch_size, list(inputs),
                                 self.config.pad_value)
        inputs = self._check_inputs(batch_size, inputs)
        if not self.is_enabled():  # CUPYGRAPH_DISABLE set since the manager was made
            self._stats.record_fallback(FallbackReason.MODE_NONE)
            if batch_size:
                self._stats.record_batch_sizes(batch_size)
            result = execute_fn(*inputs)
        else:
            graphed = self._graphed(execute_fn, len(inputs))
            result = graphed.call_with_descriptor(BatchDescriptor(batch_size, seq_len=seq_len), *inputs)
        if output_shapes is not None:
            got = _shapes(result)
            if got != [tuple(s) for s in output_shapes]:
                raise InputMismatchError(
                    f"execute_fn returned shapes {got}, expected {list(map(tuple, output_shapes))}")
        return result

    @staticmethod
    def _check_inputs(batch_size: int, inputs: Sequence[Any]) -> tuple[Any, ...]:
        inputs = tuple(inputs)
        for i, array in enumerate(inputs):
            if getattr(array, "shape", (batch_size,))[:1] != (batch_size,):
                raise InputMismatchError(
                    f"input {i} has {getattr(array, 'shape', None)} but batch_size={batch_size}; inputs are "
                    f"batched along axis 0"
                )
        return inputs

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
            self._captured.clear()
            for _, graphed in self._functions.values():
                graphed.clear()


def _shapes(result: Any) -> list[tuple[int, ...]]:
    """The shapes of a function's array outputs, in order (a single array is one output)."""
    leaves, _ = flatten(result, lambda leaf: hasattr(leaf, "shape"))
    return [tuple(leaf.shape) for leaf in leaves if hasattr(leaf, "shape")]


def _accepts(entry: CUDAGraphEntry, inputs: tuple[Any, ...]) -> bool:
    try:
        entry.check_inputs(inputs)
    except InputMismatchError:
        return False
    return True
