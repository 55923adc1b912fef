"""``CUDAGraphRegistry``: the one graph cache (``GraphStore``) with the seed's batch-size API on top."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..backends.base import Backend
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.decision import decide_batch_size
from ..dispatch.descriptor import BatchDescriptor
from ..errors import CaptureError
from ..pytree import flatten
from ..reasons import EvictionReason
from .entry import CUDAGraphEntry
from .key import NO_SIGNATURE, GraphKey, Signature
from .padding import InputArena
from .store import GraphStore

__all__ = ["CUDAGraphEntry", "CUDAGraphRegistry", "GraphKey", "InputArena", "RegisteredGraph"]


@dataclasses.dataclass(frozen=True)
class RegisteredGraph:
    """A graph made elsewhere and handed in through the seed's ``register_graph``: the executable and
    the input addresses it reads. The registry only holds it (no eviction, no statistics)."""

    graph: Any
    input_ptrs: tuple[int, ...]


class CUDAGraphRegistry(GraphStore):
    """The registry of captured graphs: the one graph cache every front door uses.

    Contract: the registry owns its entries and their buffers (see ``GraphStore``: lookups,
    capture, eviction, memory accounting, statistics). On top of the keyed API the front doors
    use, the seed's API finds, captures and drops graphs by batch size and sequence length: a
    batch lands on the key of its padded size. It also holds the graphs handed to the
    dispatcher's ``register_graph``.
    """

    def __init__(self, config: Optional[CUDAGraphConfig] = None, backend: Optional[Backend] = None):
        super().__init__(config, backend)
        self._registered: dict[BatchDescriptor, RegisteredGraph] = {}

    def for_device(self, device: int) -> CUDAGraphRegistry:
        """A new, empty registry with this config for ``device`` (a jitted function used there)."""
        return CUDAGraphRegistry(self.config, self.backend.on_device(device))

    # -- graphs made elsewhere (the seed's register_graph) ---------------------------------------

    def register_graph(self, descriptor: BatchDescriptor, graph: Any, input_ptrs: Sequence[int] = ()) -> None:
        """Hold a graph made outside cupygraph for ``descriptor`` (replacing one held before)."""
        with self._lock:
            self._registered[descriptor] = RegisteredGraph(graph, tuple(input_ptrs))

    def registered_graph(self, descriptor: BatchDescriptor) -> Optional[RegisteredGraph]:
        with self._lock:
            return self._registered.get(descriptor)

    def registered_graphs(self) -> dict[BatchDescriptor, RegisteredGraph]:
        """The graphs handed in through ``register_graph``, by descriptor (a copy)."""
        with self._lock:
            return dict(self._registered)

    def clear(self) -> None:
        """Drop every graph (registered ones too), forget failed keys and return the pool's memory
        (statistics are kept; each dropped entry counts as an eviction by ``clear()``)."""
        with self._lock:
            self._registered.clear()
        super().clear()


    # -- the seed's API: keys by batch size and sequence length --------------------------------

    def make_key(
        self, batch_size: int, seq_len: Optional[int] = None, mode: CUDAGraphMode = CUDAGraphMode.FULL,
        signature: Signature = NO_SIGNATURE,
    ) -> Optional[GraphKey]:
        """The key a batch of this size is kept under, or None when it runs eagerly.

        The descriptor is the one ``decide`` gives the batch under this registry's config (padding,
        seq_len buckets, token limits on the real size, the config's mode); ``mode`` names the
        graph family the caller keeps it in.
        """
        decision = decide_batch_size(self.config, batch_size, seq_len)
        if decision.descriptor is None:
            return None
        return GraphKey(decision.descriptor, CUDAGraphMode.parse(mode), signature)

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
            why = decide_batch_size(self.config, batch_size, seq_len).explain()
            raise CaptureError(f"batch_size={batch_size}, seq_len={seq_len} runs eagerly ({why}): nothing to capture")
        xp = self.backend.xp
        if inputs is None:
            inputs = filled_inputs(xp, input_shapes, self.config.pad_value, dtype)
        entry = self.capture_entry(key, capture_fn, list(inputs), {}, batched=range(len(inputs)))
        if output_shapes is not None:
            leaves, _ = flatten(entry.recording.outputs, self.backend.is_array)
            got = [tuple(leaf.shape[1:]) if sliced else tuple(leaf.shape)
                   for leaf, sliced in zip(leaves, entry.batched_outputs)]
            want = [tuple(s)[1:] if len(s) and s[0] == batch_size else tuple(s) for s in output_shapes]
            if got != want:
                detail = f"trailing shapes {got}, expected {want}"
                self.evict(key, EvictionReason.UNEXPECTED_OUTPUT_SHAPES, detail)
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
        return key is not None and self.holds(key)

    def has_descriptor(self, descriptor: BatchDescriptor, mode: CUDAGraphMode) -> bool:
        """Whether any graph (of any signature) is held for this padded descriptor and mode."""
        return any(e.key.descriptor == descriptor and e.key.mode is mode for e in self.entries())

    def remove(self, batch_size: int, seq_len: Optional[int] = None, *, mode: CUDAGraphMode = CUDAGraphMode.FULL,
               signature: Signature = NO_SIGNATURE) -> bool:
        """Drop the graph a batch of this size would use; True when one was held."""
        key = self.make_key(batch_size, seq_len, mode, signature)
        return key is not None and self.evict(key, EvictionReason.REMOVED, "removed by remove()")


def filled_inputs(xp: Any, input_shapes: Sequence[Any], fill: Any, dtype: Any = "float32") -> list[Any]:
    """Arrays of ``input_shapes`` (a shape, or a ``(shape, dtype)`` pair) filled with ``fill``: the
    seed API's inputs when the caller gives shapes but no data."""
    specs = [s if len(s) == 2 and not isinstance(s[0], int) else (s, dtype) for s in map(tuple, input_shapes)]
    return [xp.full(tuple(shape), fill, dtype=dt) for shape, dt in specs]
