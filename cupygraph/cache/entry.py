"""One captured graph with its static buffers.

``CUDAGraphEntry`` owns the copy-in / launch / copy-out sequence of a replay (the hot path of
every front door). How it replays is one strategy per entry, chosen in ``choose_strategy`` when the
entry is made and again only when what it learns changes it (writes into its arguments found on the
first replay); instrumentation is a list of launch hooks installed once (``set_hooks``). Its counts
(launches, hits, binds, use clock) live in one ``ReplayCounts``, which the compiled replay writes too
and the statistics read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..backends.base import Backend, Recording
from ..backends.fastpath.compiled import ReplayCounts, tick
from ..backends.zerocopy.binding import argument_label
from ..dispatch.descriptor import BatchDescriptor
from ..errors import InputMismatchError
from ..pytree import expand_out_batched, flatten, unflatten
from .checks.overlaps import byte_extent, refuse_hidden_writes
from .checks.writes import run_checking_writes
from .instruments.timing import KeyTiming
from .key import GraphKey
from .padding import InputArena, pad_rows
from .stats import GraphCost
from .strategies import WriteBack, run_and_write_back, run_bound, run_bound_plain, run_copied

use_tick = tick
"""The next value of the family-wide use clock (shared with the compiled replay): ``last_used`` orders
entries (LRU) without reading a clock on every replay."""

# How the caller gets an output leaf (``CUDAGraphEntry.returned``): compared by identity on the hot path.
AS_IS, COPY, SCALAR = "as it is", "a copy", "a NumPy scalar"

LaunchHook = Callable[["CUDAGraphEntry", Callable[[], None]], Callable[[], None]]
"""Wraps an entry's launch once (replay timing, sampling, NVTX ranges: ``cache/instruments/hooks.py``)."""


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
    where the caller's arrays are, and fresh outputs written directly (the bound strategies).
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
        executables: int = 8,
        labels: Sequence[str] = (),
        name: str = "",
        constants: Sequence[tuple[int, Any]] = (),
        check_first_replay: bool = False,
        landings: Sequence[Optional[Any]] = (),
        writes_constants: bool = False,
    ):
        """``check_first_replay``: nothing ran on the static buffers on a caller's data at capture (no warm-up,
        or ``warmup()``'s fill): the first replay checks for writes. ``writes_constants``: the call that
        captured wrote into a constant (``cache/first_call.py``)."""
        self.key = key
        self.name = name or "the function"
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
        self.cost: Optional[GraphCost] = None  # memory and time of the capture, set by ``recording.record``
        self.alive = True
        """False once released (evicted or cleared); a cached lookup must check it under the lock."""
        self.counts = ReplayCounts()
        """Launches, fast-path hits by rows, zero-copy calls, the use clock: written by both replay
        paths, read by the statistics (``GraphStore.stats``) and eviction."""
        self.counts.last_used = use_tick()
        self.timing: Optional[KeyTiming] = None
        """Measured eager, replay and capture times (set by the graph cache; read by eviction)."""
        self.total_replay_s = 0.0
        """Host time of the launches, measured only under ``time_replays`` (``cache/instruments/hooks.py``)."""
        self._hooked: Optional[Callable[[], None]] = None
        """The recording's launch wrapped by the launch hooks (``set_hooks``), or None: no hooks."""
        self.arena = arena if arena is not None else InputArena()
        self.padded = key.descriptor.num_tokens
        """Rows of the static buffers: the batch size the graph was captured for."""
        is_array = backend.is_array
        self.leaves, self.spec = flatten(recording.outputs, is_array)
        # Only outputs that carry the batch axis are cut back to the real batch: those declared in
        # ``out_batched``, or by default every output whose leading axis is the padded size.
        sliced = [is_array(leaf) and leaf.ndim > 0 and leaf.shape[0] == self.padded for leaf in self.leaves]
        if out_batched is not None:
            declared = expand_out_batched(out_batched, recording.outputs, len(self.leaves))
            for i, (flag, leaf) in enumerate(zip(declared, self.leaves)):
                if flag and not sliced[i]:
                    raise InputMismatchError(
                        f"output {i} is declared batched (out_batched) but has shape "
                        f"{list(getattr(leaf, 'shape', []))}, whose leading axis is not the padded size {self.padded}"
                    )
                sliced[i] = bool(flag)
        self.batched_outputs = tuple(sliced)
        """Per output leaf (in ``flatten`` order): whether it carries the batch axis and is cut to the real rows."""
        scalars, copy = recording.scalar_outputs, output_mode == "copy"
        self.returned = tuple(SCALAR if i in scalars else COPY if copy and is_array(leaf) else AS_IS
                              for i, leaf in enumerate(self.leaves))
        """Per output leaf: how the caller gets it (as it is, a copy, or the NumPy scalar the plain function gives)."""
        self.padding_checked = False
        """Whether a padded call compared its eager outputs with these (``cache/batch_axis.py``), which set
        ``batched_outputs`` then; ``padded_refusal`` says why padded calls run eagerly, if they must."""
        self.padded_refusal: Optional[str] = None
        self.single_output = self.spec is None
        self.nbytes = recording.nbytes + sum(int(b.nbytes) for b in static_inputs + self.whole_inputs)
        count = len(static_inputs) + len(self.whole_inputs)
        self.labels = list(labels) + [argument_label(i) for i in range(len(labels), count)]
        """How messages and statistics name static_inputs + whole_inputs (the caller's argument positions)."""
        self.landings: list[Optional[Any]] = list(landings) + [None] * (count - len(landings))
        """Per static buffer, the relay's copy its writes land in (``Recording.relay_landings``), or None."""
        self.written: tuple[int, ...] = ()
        """Inputs the function writes into (positions in static_inputs + whole_inputs)."""
        self.constants = [byte_extent(backend.address(a), a) for _, a in constants]
        """The bytes of the constants the graph reads by address (``checks/overlaps.byte_extent``)."""
        self.writes_constants = writes_constants and bool(self.constants)  # (``check_not_aliased``)
        self.write_back: Optional[WriteBack] = None
        self.binding: Any = None
        self.constants_token: Optional[object] = None
        """Changes whenever ``rebind_constants`` repoints constants: older shortcuts are then stale."""
        if input_binding == "auto":
            self._bind(constants, executables)
        self.check_writes = check_first_replay and bool(count) and not written
        self._run: Callable[..., Any] = functools.partial(run_copied, self)
        self.strategy = ""
        """Which replay this entry runs (``copied``, ``writes_back``, ``bound``, ``bound_plain``,
        ``first_replay_check``): chosen in ``choose_strategy`` only."""
        self.choose_strategy(written)

    # -- the one place that decides how this entry replays ---------------------------------------------

    def choose_strategy(self, written: Sequence[int] = ()) -> None:
        if written:
            self.written = tuple(written)
            self.write_back = WriteBack(self.arena, self.static_inputs, self.whole_inputs, self.written,
                                        self.landings)
            if self.binding is not None and any(self.landings[k] is not None for k in self.written):
                # Writes that land in a relay's copy never reach a bound array: every call is copied in.
                self.binding.point_at_static_buffers()
                self.binding = None
        binder = self.binding
        if self.check_writes:
            self.strategy, run = "first_replay_check", run_checking_writes
        elif binder is None:
            self.strategy, run = ("writes_back", run_and_write_back) if self.checks_overlaps else ("copied", run_copied)
        elif not self.checks_overlaps and not binder.needs_finish and self.single_output and binder.binds_outputs:
            self.strategy, run = "bound_plain", run_bound_plain
        else:
            self.strategy, run = "bound", run_bound
        self._run = functools.partial(run, self)
        self._changed()

    @property
    def checks_overlaps(self) -> bool:  # whether a call checks overlaps first (``check_not_aliased``), bound or not
        return self.write_back is not None or self.writes_constants

    def set_hooks(self, hooks: Sequence[LaunchHook]) -> None:
        """Wrap this entry's launch with ``hooks`` (innermost first), once, before it is first used."""
        hooked: Optional[Callable[[], None]] = None
        launch: Callable[[], None] = self.recording.launch
        for hook in hooks:
            launch = hooked = hook(self, launch)
        self._hooked = hooked
        self._changed()

    def _changed(self) -> None:
        """How this entry replays changed: no compiled record made before describes it any more."""
        family = getattr(self.backend, "family", None)
        if family is not None:
            family.bump()

    def _bind(self, constants: Sequence[tuple[int, Any]], executables: int) -> None:
        """Zero-copy where the recording allows it (``backends/zerocopy/binding.py``), with up to ``executables``
        executables holding the caller's addresses."""
        buffers = self.static_inputs + self.whole_inputs
        binder = self.recording.binder(buffers, self.labels, self.leaves, bind_outputs=self.output_mode == "copy",
                                       counts=self.counts, name=self.name, constants=constants, executables=executables)
        if binder is not None and binder.eligible:
            self.binding = binder
            self.copy_rows = self.backend.copy_rows

    def fast_record(self, shortcut: Any, lock: Any, arguments: tuple[Any, ...]) -> Any:
        """The compiled replay's record of ``shortcut``'s calls (``backends/fastpath/record.py``) where each
        is a bound run at the captured rows under no launch hook, with nothing to finish after the launch
        (the GPU's binder; the host reference's finishes every call in Python), else None. ``arguments``:
        what each call position must be (``Shortcuts.signature``)."""
        binder = self.binding
        if (binder is None or binder.needs_finish or self.strategy not in ("bound_plain", "bound")
                or self._hooked is not None or not self.alive or shortcut.rows != self.padded):
            return None
        return binder.record(shortcut, self, arguments, tuple(how is AS_IS for how in self.returned), lock)

    def rebind_constants(self, arrays: Sequence[tuple[int, Any]]) -> bool:
        """Point the graph at new constant arrays ((position, array), of the captured shapes, dtypes and
        strides) instead of re-capturing; False (nothing changed) where one of them cannot be bound."""
        if self.binding is None or not self.binding.bind_constants(arrays):
            return False
        self.constants = [byte_extent(self.backend.address(a), a) for _, a in arrays]
        self.constants_token = object()
        self._changed()
        return True

    # -- what the statistics and eviction read --------------------------------------------------------

    @property
    def replay_count(self) -> int:
        """Launches of this entry's graph, by either replay path."""
        return int(self.counts.replays)

    @property
    def last_used(self) -> int:
        """The use clock at the last launch or lookup (LRU order)."""
        return int(self.counts.last_used)

    @last_used.setter
    def last_used(self, value: int) -> None:
        self.counts.last_used = value

    def tally(self) -> tuple[Any, Any, Any]:
        """(binds, copies) per argument label so far, and the executables made for caller addresses (``{"made",
        "seconds", "repointed_calls"}``), from the zero-copy binder (empty without one)."""
        return self.binding.tally() if self.binding is not None else ({}, {}, {})

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
        replays = self.replay_count
        return 1e3 * self.total_replay_s / replays if replays else 0.0

    def increment_replay(self) -> None:
        counts = self.counts
        counts.replays += 1
        counts.last_used = use_tick()

    # -- replaying ------------------------------------------------------------------------------------

    def run(self, inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
        """The hot path, for callers that already validated ``inputs``: this entry's strategy."""
        return self._run(inputs, rows, whole)

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
        arena = self.arena
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
        hooked = self._hooked
        if hooked is None:
            self.recording.launch()
        else:
            hooked()
        counts = self.counts  # increment_replay() inlined: this is the replay hot path
        counts.replays += 1
        counts.last_used = use_tick()

    def outputs(self, rows: int, stream: Any = None) -> Any:
        """This call's outputs, cut to ``rows`` and copied or viewed per ``output_mode``."""
        copy_out = self.backend.copy_out
        if self.single_output:
            leaf = self.leaves[0]
            if self.batched_outputs[0] and rows != self.padded:
                leaf = leaf[:rows]
            how = self.returned[0]
            return leaf if how is AS_IS else copy_out(leaf, stream) if how is COPY else leaf[()]
        result = []
        for leaf, sliced, how in zip(self.leaves, self.batched_outputs, self.returned):
            if sliced and rows != self.padded:
                leaf = leaf[:rows]
            result.append(leaf if how is AS_IS else copy_out(leaf, stream) if how is COPY else leaf[()])
        return unflatten(self.spec, result)

    def check_not_aliased(self, inputs: Sequence[Any], whole: Sequence[Any], written: Sequence[int]) -> None:
        """``AliasedWrite`` where a write the replay makes into a copy would not show through an overlapping
        argument or constant (``checks/overlaps.py``); ``written``: positions in ``[*inputs, *whole]``."""
        refuse_hidden_writes(self.backend.may_share_memory, self.backend.address, [*inputs, *whole], written,
                             self.constants, self.writes_constants, self.labels, self.key.descriptor)

    def replay(self, inputs: Sequence[Any], whole: Sequence[Any] = ()) -> Any:
        """Copy ``inputs`` in, launch, and return the outputs for the real batch."""
        return self.run(inputs, self.check_inputs(inputs), whole)

    def release(self) -> None:
        """Free the executable and the static buffers (the entry is unusable afterwards)."""
        self.alive = False
        self._changed()  # under the family lock: no compiled record launches it from now on
        if self.binding is not None:
            self.binding.release()
            self.binding = None
        self.recording.release()
        self.static_inputs = []
        self.whole_inputs = []
        self.leaves = []
        self._run = _released  # no reference cycle through a strategy left
        self._hooked = None
        self.write_back = None  # it holds the static buffers too
        self.arena = InputArena()  # drop the shared buffers: the registry may be returning them

    def __repr__(self) -> str:
        return (
            f"CUDAGraphEntry({self.key.descriptor}, mode={self.key.mode.name}, backend={self.backend.name}, "
            f"replays={self.replay_count}, nbytes={self.nbytes})"
        )


def _released(inputs: Sequence[Any], rows: int, whole: Sequence[Any] = ()) -> Any:
    raise RuntimeError("this graph was released (evicted or cleared): its entry cannot replay any more")
