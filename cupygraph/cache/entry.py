"""One captured graph with its static buffers.

``CUDAGraphEntry`` owns the copy-in / launch / copy-out sequence of a replay (the hot path of
every front door), on static buffers from an ``InputArena`` (``padding.py``).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

from ..backends.base import Backend, Recording
from ..backends.binding import argument_label
from ..dispatch.descriptor import BatchDescriptor
from ..errors import AliasedWrite, InputMismatchError
from ..pytree import expand_out_batched, flatten, unflatten
from .key import GraphKey
from .padding import InputArena, pad_rows
from .timing import KeyTiming

# How the caller gets an output leaf (``CUDAGraphEntry._returned``): compared by identity on the hot path.
_AS_IS, _COPY, _SCALAR = "as it is", "a copy", "a NumPy scalar"

use_tick = itertools.count(1).__next__
"""The next value of the family-wide use clock: ``last_used`` orders entries (LRU) without reading a
clock on every replay."""


class CUDAGraphEntry:
    """A captured graph with its static buffers (the seed calls it ``GraphEntry``: ``cupygraph.compat.aliases``).

    Contract: the entry owns its static input buffers and the static outputs its ``recording``
    writes. ``replay(inputs)`` copies ``inputs`` into the static buffers (rows beyond the real batch
    hold ``pad_value``, or under ``pad_mode="edge"`` the last real row), launches the graph on the
    caller's current stream and returns the outputs cut to the real batch: fresh copies under
    ``output_mode="copy"`` (a NumPy scalar where the plain function returns one), views into the static
    outputs under ``"view"`` (overwritten by the next replay of any graph of the same function). An entry
    with no static inputs (the vLLM-style wrapper's) reads the caller's arrays by address. Under
    ``input_binding="auto"`` a batch of exactly ``padded`` rows may instead be read (and written)
    where the caller's arrays are, and fresh outputs written directly (``_run_bound``).
    """

    def __init__(
        self,
        key: GraphKey,
        recording: Recording,
        backend: Backend,
        static_inputs: list[Any],
        input_addresses: tuple[int, ...],
        *,
        whole_inputs: Sequence[Any] = (),
        arena: Optional[InputArena] = None,
        pad_value: Any = 0,
        pad_mode: str = "constant",
        output_mode: str = "copy",
        capture_time: float = 0.0,
        out_batched: Any = None,
        written: Sequence[int] = (),
        input_binding: str = "copy",
        counts: Optional[tuple[Any, Any]] = None,
        labels: Sequence[str] = (),
        name: str = "",
        constants: Sequence[tuple[int, Any]] = (),
    ):
        self.key = key
        self.recording = recording
        self.backend = backend
        self.static_inputs = static_inputs
        self.whole_inputs = list(whole_inputs)
        self.input_addresses = input_addresses
        """Addresses of the arrays the graph reads (static buffers, and arrays captured by address)."""
        self.pad_value = pad_value
        self.pad_mode = pad_mode
        self.output_mode = output_mode
        self.capture_time = capture_time
        self.captured_at = time.time()
        self.alive = True
        """False once released (evicted or cleared); a cached lookup must check it under the lock."""
        self.replay_count = 0
        self.timing: Optional[KeyTiming] = None
        """Measured eager, replay and capture times (set by the graph cache; read by eviction)."""
        self.total_replay_s = 0.0
        """Host time of the launches, measured only under ``time_replays`` (``cache/instrument.py``)."""
        self.last_used: float = use_tick()
        self._arena = arena if arena is not None else InputArena()
        self.padded = key.descriptor.num_tokens
        """Rows of the static buffers: the batch size the graph was captured for."""
        is_array = backend.is_array
        self._leaves, self._spec = flatten(recording.outputs, is_array)
        # Only outputs that carry the batch axis are cut back to the real batch: those declared in
        # ``out_batched``, or by default every output whose leading axis is the padded size.
        sliced = [is_array(leaf) and leaf.ndim > 0 and leaf.shape[0] == self.padded for leaf in self._leaves]
        if out_batched is not None:
            declared = expand_out_batched(out_batched, recording.outputs, len(self._leaves))
            for i, (flag, leaf) in enumerate(zip(declared, self._leaves)):
                if flag and not sliced[i]:
                    raise InputMismatchError(
                        f"output {i} is declared batched (out_batched) but has shape "
                        f"{list(getattr(leaf, 'shape', []))}, whose leading axis is not the padded size {self.padded}"
                    )
                sliced[i] = bool(flag)
        self.batched_outputs = tuple(sliced)
        """Per output leaf (in ``flatten`` order): whether it carries the batch axis and is cut to the real rows."""
        scalars, copy = recording.scalar_outputs, output_mode == "copy"
        self._returned = tuple(_SCALAR if i in scalars else _COPY if copy and is_array(leaf) else _AS_IS
                               for i, leaf in enumerate(self._leaves))
        """Per output leaf: how the caller gets it (as it is, a copy, or the NumPy scalar the plain function gives)."""
        self.padding_checked = False
        """Whether a padded call compared its eager outputs with these (``cache/batch_axis.py``), which set
        ``batched_outputs`` then; ``padded_refusal`` says why padded calls run eagerly, if they must."""
        self.padded_refusal: Optional[str] = None
        self._single = self._spec is None
        self.nbytes = recording.nbytes + sum(int(b.nbytes) for b in static_inputs + self.whole_inputs)
        self.written = tuple(written)
        """Inputs the function writes into (positions in static_inputs + whole_inputs), found at capture."""
        count = len(static_inputs) + len(self.whole_inputs)
        self.labels = list(labels) + [argument_label(i) for i in range(len(labels), count)]
        """How messages and statistics name static_inputs + whole_inputs (the caller's argument positions)."""
        self._write_back: Optional[_WriteBack] = None
        if self.written:
            # Chosen once, for this instance only: every other entry's run stays the class's hot path.
            self._write_back = _WriteBack(self._arena, static_inputs, self.whole_inputs, self.written)
            self.run = self._run_and_write_back  # type: ignore[method-assign]
        self._binder: Any = None
        self.constants_token: Optional[object] = None
        """Changes whenever ``rebind_constants`` points the graph at other constant arrays: a plan made
        before is then stale (the fast path compares it)."""
        if input_binding == "auto":
            self._bind(counts if counts is not None else (Counter(), Counter()), name, constants)

    def rebind_constants(self, arrays: Sequence[tuple[int, Any]]) -> bool:
        """Point the graph at new constant arrays ((position, array), of the captured shapes, dtypes and
        strides) instead of re-capturing; False (nothing changed) where one of them cannot be bound."""
        if self._binder is None or not self._binder.bind_constants(arrays):
            return False
        self.constants_token = object()
        return True

    def _bind(self, counts: tuple[Any, Any], name: str,
              constants: Sequence[tuple[int, Any]]) -> None:
        """Zero-copy where the recording allows it (``backends/binding.py``): ``run`` becomes ``_run_bound``."""
        buffers = self.static_inputs + self.whole_inputs
        binder = self.recording.binder(buffers, self.labels, self._leaves, bind_outputs=self.output_mode == "copy",
                                       counts=counts, name=name or "the function", constants=constants)
        if binder is None or not binder.eligible:
            return
        self._binder = binder
        self._copy_rows = self.backend.copy_rows
        self._run_copied = self.run
        plain = self._write_back is None and not binder.needs_finish and self._single and binder.binds_outputs
        self.run = self._run_bound_plain if plain else self._run_bound  # type: ignore[method-assign]

    @property
    def cudagraph(self) -> Recording:
        """The seed's name of ``recording`` (a CUDA graph on the GPU, a NumPy re-execution on the host)."""
        return self.recording

    @property
    def batch_descriptor(self) -> BatchDescriptor:
        return self.key.descriptor

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def avg_replay_time_ms(self) -> float:
        """Mean host time of a launch, in milliseconds; 0.0 unless the config's ``time_replays`` is on."""
        return 1e3 * self.total_replay_s / self.replay_count if self.replay_count else 0.0

    def increment_replay(self) -> None:
        self.replay_count += 1
        self.last_used = use_tick()

    def fast_replayer(self, plan: Any, lock: Any) -> Any:
        """The backend's compiled replay of ``plan``'s calls (``backends/cupy_fast.py``) where each is a
        plain bound run under no launch wrapper (``cache/instrument.py``), else None."""
        mine, binder = vars(self), self._binder
        if (binder is None or mine.get("run") != self._run_bound_plain or "launch" in mine
                or plan.rows != self.padded or not hasattr(binder, "fast_replayer")):
            return None
        return binder.fast_replayer(plan, self, lock, use_tick)

    def check_inputs(self, inputs: Sequence[Any]) -> int:
        """Validate ``inputs`` against the static buffers; return the real batch size."""
        if len(inputs) != len(self.static_inputs):
            raise InputMismatchError(
                f"graph for {self.key.descriptor} takes {len(self.static_inputs)} batched inputs, got {len(inputs)}"
            )
        rows: Optional[int] = None
        for i, (buf, src) in enumerate(zip(self.static_inputs, inputs)):
            if not self.backend.is_array(src):
                raise InputMismatchError(
                    f"input {i} is {type(src).__module__}.{type(src).__name__}; this graph was captured "
                    f"with {self.backend.name} arrays"
                )
            if src.dtype != buf.dtype or src.shape[1:] != buf.shape[1:] or src.ndim != buf.ndim:
                raise InputMismatchError(
                    f"input {i} is {src.dtype}{list(src.shape)} but the graph was captured for "
                    f"{buf.dtype}[n, {', '.join(map(str, buf.shape[1:]))}] with n <= {self.padded}"
                )
            if rows is None:
                rows = src.shape[0]
            elif src.shape[0] != rows:
                raise InputMismatchError(f"input {i} has {src.shape[0]} rows but input 0 has {rows}")
        if rows is None or rows > self.padded:
            raise InputMismatchError(f"batch of {rows} rows does not fit the graph for {self.padded} rows")
        return rows

    def load_inputs(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """Copy the real rows in; rewrite the padding only when the real batch size changed.

        ``whole`` are the unbatched array arguments, copied entirely into their static buffers.
        Returns the stream handle the rest of the call uses.
        """
        backend = self.backend
        stream = backend.order_after_last_use()
        copy = backend.copy_rows
        for buf, src in zip(self.static_inputs, inputs):
            copy(buf, src, stream)
        for buf, src in zip(self.whole_inputs, whole):
            copy(buf, src, stream)
        arena = self._arena
        state: Optional[tuple[int, int]] = (id(self), rows)
        if arena.state != state:
            if rows < self.padded:
                for buf in self.static_inputs:
                    pad_rows(backend, buf, rows, self.pad_value, self.pad_mode, stream)
                if self.pad_mode == "edge":  # the padding copies this call's data: the next call writes it again
                    state = None
            arena.state = state
        return stream

    def launch(self) -> None:
        """Replay the graph on the current stream; the static inputs must already hold the data."""
        self.recording.launch()
        self.replay_count += 1  # increment_replay() inlined: this is the replay hot path
        self.last_used = use_tick()

    def outputs(self, rows: int, stream: Any = None) -> Any:
        """This call's outputs, cut to ``rows`` and copied or viewed per ``output_mode``."""
        copy_out = self.backend.copy_out
        if self._single:
            leaf = self._leaves[0]
            if self.batched_outputs[0] and rows != self.padded:
                leaf = leaf[:rows]
            how = self._returned[0]
            return leaf if how is _AS_IS else copy_out(leaf, stream) if how is _COPY else leaf[()]
        result = []
        for leaf, sliced, how in zip(self._leaves, self.batched_outputs, self._returned):
            if sliced and rows != self.padded:
                leaf = leaf[:rows]
            result.append(leaf if how is _AS_IS else copy_out(leaf, stream) if how is _COPY else leaf[()])
        return unflatten(self._spec, result)

    def run(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """The hot path, for callers that already validated ``inputs``: copy in, launch, outputs."""
        stream = self.load_inputs(inputs, rows, whole)
        self.launch()
        return self.outputs(rows, stream)

    def check_not_aliased(self, inputs: Sequence[Any], whole: Sequence[Any], written: Sequence[int]) -> None:
        """``AliasedWrite`` when an argument the function writes into (or may: ``written`` lists the
        positions in ``[*inputs, *whole]``) overlaps another argument. Two read-only arguments may
        overlap: the replay reads both as the eager call does."""
        arrays = [*inputs, *whole]
        overlaps = self.backend.may_share_memory
        for i in written:
            for j in range(len(arrays)):
                if j != i and overlaps(arrays[i], arrays[j]):
                    first, second = sorted((i, j))
                    raise AliasedWrite(
                        f"{self.labels[first]} and {self.labels[second]} share memory, and the function writes (or "
                        f"may write) into {self.labels[i]}: a replay of the graph for {self.key.descriptor} could not "
                        "show the write through both; pass separate arrays (this call runs eagerly)")

    def _run_bound_plain(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """``_run_bound`` for the common case, its checks decided once: one output, bound, and nothing
        written back or finished after the launch."""
        if rows != self.padded:
            return self._run_bound(inputs, rows, whole)
        copied, fresh = self._binder.bind(inputs, whole, self._copy_rows, self.backend.order_after_last_use())
        if copied:
            self._arena.state = (id(self), rows)
        self.launch()
        return fresh[0]

    def _run_bound(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """``run`` with zero-copy: arguments and outputs bound to the caller's arrays where allowed."""
        binder = self._binder
        if rows != self.padded:  # the graph reads the padded static buffers: copy as ever
            if binder.away:
                binder.home()
            return self._run_copied(inputs, rows, whole)  # (checks overlaps itself when it writes back)
        if self._write_back is not None:
            self.check_not_aliased(inputs, whole, self.written)
        stream = self.backend.order_after_last_use()
        copied, fresh = binder.bind(inputs, whole, self._copy_rows, stream)
        if copied:
            self._arena.state = (id(self), rows)
        self.launch()
        if self._write_back is not None:
            self._write_back(inputs, rows, whole, copied)
        if binder.needs_finish:
            binder.finish(fresh)
        if fresh is None:
            return self.outputs(rows, stream)
        if self._single:
            return fresh[0]
        bound = dict(zip(binder.output_positions, fresh))
        copy_out = self.backend.copy_out
        result = [bound[i] if i in bound else leaf if how is _AS_IS else copy_out(leaf, stream) if how is _COPY
                  else leaf[()] for i, (leaf, how) in enumerate(zip(self._leaves, self._returned))]
        return unflatten(self._spec, result)

    @property
    def binding(self) -> Any:
        """The zero-copy binder of this entry, or None when every call copies."""
        return self._binder

    def _run_and_write_back(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """``run`` of an entry whose function writes into its copied arguments (found at capture)."""
        self.check_not_aliased(inputs, whole, self.written)
        stream = self.load_inputs(inputs, rows, whole)
        self.launch()
        self._write_back(inputs, rows, whole)  # type: ignore[misc]
        return self.outputs(rows, stream)

    def replay(self, inputs: Sequence[Any], whole: Sequence[Any] = ()) -> Any:
        """Copy ``inputs`` in, launch, and return the outputs for the real batch."""
        return self.run(inputs, self.check_inputs(inputs), whole)

    def release(self) -> None:
        """Free the executable and the static buffers (the entry is unusable afterwards)."""
        self.alive = False
        if self._binder is not None:  # first: it gives the recording its own launch back
            self._binder.release()
            self._binder = None
        self.recording.release()
        self.static_inputs = []
        self.whole_inputs = []
        self._leaves = []
        self.__dict__.pop("run", None)  # a bound method of this entry: drop the reference cycle
        self.__dict__.pop("launch", None)
        self.__dict__.pop("_run_copied", None)
        self._write_back = None  # it holds the static buffers too
        self._arena = InputArena()  # drop the shared buffers: the registry may be returning them

    def __repr__(self) -> str:
        return (
            f"CUDAGraphEntry({self.key.descriptor}, mode={self.key.mode.name}, backend={self.backend.name}, "
            f"replays={self.replay_count}, nbytes={self.nbytes})"
        )


class _WriteBack:
    """What a function that writes into its copied arguments did, done to the caller's arrays.

    Under a graph the function writes into the static copies; the eager call would have changed
    the caller's arrays. After each launch the rows it wrote are copied back, and the padding it
    may have written is marked for rewriting.
    """

    __slots__ = ("arena", "batched", "count", "whole")

    def __init__(self, arena: InputArena, static_inputs: Sequence[Any], whole_inputs: Sequence[Any],
                 written: Sequence[int]):
        count = self.count = len(static_inputs)
        self.arena = arena
        self.batched = [(k, static_inputs[k]) for k in written if k < count]
        self.whole = [(k - count, whole_inputs[k - count]) for k in written if k >= count]

    def __call__(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any], copied: int = -1) -> None:
        """``copied``: a bit per buffer (batched, then whole) that held the call's data; a bound
        argument was written in place by the graph itself."""
        for k, buf in self.batched:
            if copied >> k & 1:
                inputs[k][...] = buf[:rows]
        count = self.count
        for k, buf in self.whole:
            if copied >> (count + k) & 1:
                whole[k][...] = buf
        self.arena.state = None

