"""``CUDAGraphRegistry``: the one graph cache (``GraphStore``) with the seed's batch-size API on top."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from ..backends.base import Backend
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..config.values import pad_value_problem
from ..dispatch.decision import decide_batch_size
from ..dispatch.descriptor import BatchDescriptor
from ..errors import CaptureError, InputMismatchError
from ..reasons import EvictionReason
from .entry import CUDAGraphEntry
from .key import NO_SIGNATURE, GraphKey, Signature
from .store import GraphStore

__all__ = ["CUDAGraphRegistry", "RegisteredGraph", "check_output_shapes", "seed_inputs"]


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
        ``(shape, dtype)`` pair (a shape alone: ``dtype``); buffers are padded to the capture size.
        ``inputs``, when given, must agree with ``input_shapes`` and are copied in first (otherwise the
        buffers start filled with ``pad_value``). ``output_shapes``, when given, are checked against
        the outputs for the real batch (``check_output_shapes``).
        """
        key = self.make_key(batch_size, seq_len, mode, signature)
        if key is None:
            why = decide_batch_size(self.config, batch_size, seq_len).explain()
            raise CaptureError(f"batch_size={batch_size}, seq_len={seq_len} runs eagerly ({why}): nothing to capture")
        inputs = seed_inputs(self.backend.xp, input_shapes, batch_size, inputs, self.config.pad_value, dtype)
        entry = self.capture_entry(key, capture_fn, inputs, {}, batched=range(len(inputs)))
        check_output_shapes(self, entry, batch_size, output_shapes)
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


# -- capture by batch size: shared by ``capture`` and ``CUDAGraphManager.capture_graph`` -----------------

def seed_inputs(xp: Any, input_shapes: Any, batch_size: int, inputs: Optional[Sequence[Any]], fill: Any,
                dtype: Any = "float32") -> list[Any]:
    """The inputs of a capture by batch size: ``inputs`` checked against ``input_shapes`` (one shape, or
    ``(shape, dtype)`` pair, per input, the batch first), or without ``inputs`` arrays of those shapes
    filled with ``fill`` (a shape alone: ``dtype``). A malformed entry, or an input that disagrees
    with its entry, raises naming it."""
    specs = _input_specs(input_shapes, batch_size)
    if inputs is None:
        for i, (_, dt) in enumerate(specs):
            _check_fill(fill, np.dtype(dtype if dt is None else dt), i)
        return [xp.full(shape, fill, dtype=dtype if dt is None else dt) for shape, dt in specs]
    if len(inputs) != len(specs):
        raise InputMismatchError(f"input_shapes has {len(specs)} entries for {len(inputs)} inputs; give one per input")
    for i, (array, (shape, dt)) in enumerate(zip(inputs, specs)):
        if tuple(getattr(array, "shape", ())) != shape:
            raise InputMismatchError(f"input {i} has shape {tuple(getattr(array, 'shape', ()))}, expected {shape} "
                                     f"(input_shapes[{i}])")
        if dt is not None and getattr(array, "dtype", None) != dt:
            raise InputMismatchError(f"input {i} has dtype {getattr(array, 'dtype', None)}, expected {dt} "
                                     f"(input_shapes[{i}])")
        _check_fill(fill, getattr(array, "dtype", None), i)
    return list(inputs)


def _check_fill(pad_value: Any, dtype: Any, i: int) -> None:
    """Input ``i``'s buffer is filled (and padded) with ``pad_value``: it must fit ``dtype`` exactly,
    as ``check_pad_value`` makes sure for a call's batched arguments."""
    problem = None if dtype is None else pad_value_problem(pad_value, dtype)
    if problem is not None:
        raise InputMismatchError(f"{problem}: it cannot fill the padding of input {i} (input_shapes[{i}], "
                                 f"{np.dtype(dtype)}); choose a pad_value that fits (for example 0)")


def _input_specs(input_shapes: Any, batch_size: int) -> list[tuple[tuple[int, ...], Optional[np.dtype[Any]]]]:
    """``input_shapes`` as ``(shape, dtype or None)`` per input; a malformed entry raises naming it."""
    if not _is_sequence(input_shapes):
        raise TypeError(f"input_shapes must be a list with one shape (or (shape, dtype) pair) per input, "
                        f"got {type(input_shapes).__name__}")
    specs = []
    for i, entry in enumerate(input_shapes):
        shape, dtype = entry, None
        if _is_sequence(entry) and len(entry) == 2 and _is_sequence(entry[0]):
            shape, dtype = entry
        if not _is_sequence(shape) or not all(_is_dim(d) for d in shape):
            raise TypeError(f"input_shapes[{i}] must be a shape (a tuple of non-negative ints, the batch first) or a "
                            f"(shape, dtype) pair such as (({batch_size}, 16), 'float32'), got {entry!r}")
        shape = tuple(int(d) for d in shape)
        if shape[:1] != (batch_size,):
            raise ValueError(f"input_shapes[{i}] is {shape}, whose leading axis is not batch_size={batch_size}; "
                             f"inputs are batched along axis 0")
        if dtype is not None:
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                raise TypeError(f"input_shapes[{i}]: {dtype!r} is not a dtype; give one such as 'float32'") from None
        specs.append((shape, dtype))
    return specs


def check_output_shapes(store: GraphStore, entry: CUDAGraphEntry, batch_size: int,
                        output_shapes: Optional[Sequence[Sequence[int]]]) -> None:
    """``CaptureError`` (the graph dropped) when ``output_shapes`` is given and the outputs of ``entry``
    for a batch of ``batch_size`` rows have other shapes."""
    if output_shapes is None:
        return
    got = [(batch_size, *leaf.shape[1:]) if sliced else tuple(leaf.shape)
           for leaf, sliced in zip(entry.leaves, entry.batched_outputs) if hasattr(leaf, "shape")]
    want = [tuple(s) for s in output_shapes]
    if got != want:
        detail = (f"capture_fn returned outputs of shapes {got} for batch_size={batch_size}, but output_shapes "
                  f"says {want}: fix output_shapes (the batch first), or leave it out to skip this check")
        store.evict(entry.key, EvictionReason.UNEXPECTED_OUTPUT_SHAPES, detail)
        raise CaptureError(detail)


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _is_dim(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and int(value) >= 0
