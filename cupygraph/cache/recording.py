"""Recording one key's graph into an entry: static buffers filled from the call, warm-up and capture,
writes into the arguments detected (``checks/writes.py``).

Whatever a capture allocates is let go in one place (``_Staging.close``, in a ``finally``) when
it fails; the ``CUDAGraphEntry`` it returns owns what it keeps.
"""

from __future__ import annotations

import dataclasses
import enum
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from ..backends.base import Backend, Recording
from ..backends.guards.baked_numbers import find_baked_numbers
from ..backends.guards.uploads import upload_policy
from ..backends.relay import NO_RELAY, RelayRequest
from ..backends.zerocopy.binding import argument_label
from ..config.defaults import routes_library_calls
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor
from ..errors import CaptureError
from ..logs import logger
from ..pytree import flatten
from ..random import draws_given_back
from ..reasons import FallbackReason
from ..routes import routed_library_calls
from .checks.writes import changed
from .entry import CUDAGraphEntry
from .key import GraphKey
from .padding import InputArena, pad_rows
from .stats import GraphCost


class _RecordingThreads(threading.local):
    """How many graphs this thread is recording now (nested: a capture inside a warm-up); ``active``, shared by
    every thread, lets a call outside any recording skip the thread-local lookup."""

    active = 0  # class attribute: every thread's recordings, counted together
    depth = 0  # per thread (threading.local)


_recording = _RecordingThreads()
_counting_lock = threading.Lock()


def recording_here() -> bool:
    """Whether this thread is recording a graph now (a function's warm-ups or capture run). A jitted function
    called there runs inline: its kernels are part of the graph being recorded, as ``jax.jit`` inlines a
    nested jit, and it captures nothing of its own (its capture would start inside the other's)."""
    return _RecordingThreads.active > 0 and _recording.depth > 0


@contextmanager
def _recording_now() -> Iterator[None]:
    with _counting_lock:
        _RecordingThreads.active += 1
    _recording.depth += 1
    try:
        yield
    finally:
        _recording.depth -= 1
        with _counting_lock:
            _RecordingThreads.active -= 1



@dataclasses.dataclass(slots=True)  # not frozen: a front door makes one per miss, and frozen costs 4x
class CaptureRequest:
    """What to record: ``fn(*args, **kwargs)``, and how its arguments reach the graph (never changed once made).

    The arrays at positions ``batched`` are copied into static buffers of the key's padded rows
    (padding filled per ``pad_mode``: ``padding.pad_rows``); those at ``copied`` into static buffers of their own
    shape; every other argument is passed as it is, so arrays among them are read by address.
    ``out_batched`` declares which outputs carry the batch axis (see ``CUDAGraphEntry``).
    ``warmups``: eager runs before the capture (None: the config's ``num_warmups``; 0 where they
    would write again where the call itself wrote, ``cache/first_call.py``). ``written``: positions of
    copied arguments the function is known to write into (the call's own run changed them, so the
    static copies already hold what a warm-up would write there); ``writes_constants``: that run changed a
    constant argument (the entry then refuses calls where a constant overlaps a copied argument).
    ``synthetic``: the arrays hold ``warmup()``'s fill, not a caller's data, so a write that keeps the
    fill as it was (``x *= 2`` on zeros) cannot show in the warm-ups: the first replay on a caller's data
    checks again.
    """

    fn: Callable[..., Any]
    args: Sequence[Any]
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    batched: Sequence[int] = ()
    copied: Sequence[int] = ()
    out_batched: Any = None
    warmups: Optional[int] = None
    written: Sequence[int] = ()
    writes_constants: bool = False
    synthetic: bool = False

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    @property
    def rows(self) -> int:
        """The call's real batch (0 without batched arrays)."""
        return self.args[self.batched[0]].shape[0] if self.batched else 0


def record(
    key: GraphKey, request: CaptureRequest, *, backend: Backend, config: CUDAGraphConfig, arena: InputArena,
) -> CUDAGraphEntry:
    """Warm up and record ``request`` for ``key`` onto static buffers from ``arena``.

    Raises ``CaptureError`` when the function cannot be recorded, when the static buffers or
    a warm-up allocation are refused (out of memory), or when it returns something a replay
    could not reproduce; any other exception of the function propagates as it is.
    """
    backend.order_after_last_use()
    warmups = config.num_warmups if request.warmups is None else request.warmups
    pool_before, made_before = backend.pool_bytes(), arena.made_bytes
    staging = _Staging(backend, arena, key.descriptor.num_tokens, config.pad_value, config.pad_mode)
    try:
        with _memory_refusal_fails_capture(key.descriptor):
            staging.stage(request)
            start = time.perf_counter()
            # The warm-ups' and capture run's draws from cupygraph.random are given back: a call's
            # draws are its own eager run's and its replays' (cache/first_call.py). CuPy's library calls
            # the graph could not hold run through cupygraph's capture-safe ones (routes/).
            # Warm-ups skipped where the config has some: the call's own run wrote where they would write.
            skipped = warmups == 0 and config.num_warmups > 0
            with _recording_now(), upload_policy(config.host_uploads, warmups, skipped), draws_given_back(), \
                    routed_library_calls(request.fn, backend.name, routes_library_calls(config),
                                         key.mode is CUDAGraphMode.PIECEWISE) as routed:
                staging.recording = backend.capture(
                    request.fn, staging.call_args, dict(request.kwargs),
                    num_warmups=warmups,
                    capture_mode=config.capture_mode,
                    gc_freeze=config.gc_freeze,
                    piecewise=key.mode is CUDAGraphMode.PIECEWISE,
                    pdl=config.pdl,
                    bind=config.input_binding == "auto",
                    # no relays where it writes into an argument (its writes must reach the caller)
                    relay=NO_RELAY if request.written else RelayRequest(
                        tuple(staging.positions), config.output_mode == "copy"),
                )
            seconds = time.perf_counter() - start
            staging.recording.routed_calls = tuple(dict.fromkeys(routed))  # each routed call once, in order
            if config.debug:  # what the graph keeps of the numbers it read besides its arguments
                staging.recording.baked_numbers = find_baked_numbers(request.fn, request.args)
        check_outputs(staging.recording.outputs, backend.is_array)
        written = sorted({*staging.written(), *(k for k, p in enumerate(staging.positions) if p in request.written)})
        if written:
            logger.info(
                "%s() writes into its argument(s) %s: each replay copies them back into the caller's arrays, "
                "as the eager call would have changed them", request.name, [staging.positions[k] for k in written],
            )
        entry = CUDAGraphEntry(
            key, staging.recording, backend, list(staging.static_inputs),
            tuple(backend.address(a) for a in staging.call_args if backend.is_array(a)),
            whole_inputs=staging.whole_inputs, arena=arena,
            pad_value=config.pad_value, pad_mode=config.pad_mode, output_mode=config.output_mode,
            capture_time=seconds, out_batched=request.out_batched, written=written,
            input_binding=config.input_binding, executables=config.executables_per_graph,
            labels=[argument_label(p) for p in staging.positions], name=request.name,
            constants=[(i, a) for i, a in enumerate(request.args)
                       if i not in staging.positions and backend.is_array(a)],
            # Nothing ran on the static buffers without warm-ups (a stream capture only records; the host
            # undoes its capture run), and warmup()'s fill hides writes that keep it: the first replay on a
            # caller's data is the first chance to see writes into them.
            check_first_replay=warmups == 0 or request.synthetic,
            landings=[staging.recording.relay_landings.get(p) for p in staging.positions],
            writes_constants=request.writes_constants,
        )
        staging.recording = None  # the entry owns it now
        recording = entry.recording
        entry.cost = GraphCost(
            key.mode.name, key.descriptor.num_tokens, key.descriptor.seq_len,
            textwrap.shorten(key.signature.describe(), 200, placeholder=" ..."),
            backend.pool_bytes() - pool_before if backend.has_pool else arena.made_bytes - made_before,
            recording.executable_bytes, recording.executable_source,
            seconds, hash(key))
        return entry
    except CaptureError as err:
        # Nobody reads the frames of a capture that fell back: let go of the static buffers and
        # temporaries they hold, so the memory can go back below.
        _drop_frame_locals(err)
        raise
    finally:
        staging.close()


class _Staging:
    """The static buffers and the recording of one capture while it is made."""

    def __init__(self, backend: Backend, arena: InputArena, padded: int, pad_value: Any, pad_mode: str):
        self.backend, self.arena, self.padded, self.pad_value = backend, arena, padded, pad_value
        self.pad_mode = pad_mode
        self.call_args: list[Any] = []
        self.static_inputs: list[Any] = []
        self.whole_inputs: list[Any] = []
        self.positions: list[int] = []
        """Argument position of each static buffer (static_inputs, then whole_inputs)."""
        self.snapshots: list[Any] = []
        self.recording: Optional[Recording] = None

    def stage(self, request: CaptureRequest) -> None:
        """Copy the call's batched and copied arrays into static buffers; remember what they held."""
        backend, args = self.backend, request.args
        self.arena.state = None  # the buffers are rewritten here, padding included
        self.call_args = list(args)
        for index in request.batched:
            src = args[index]
            buf = self.arena.view(backend, index, (self.padded, *src.shape[1:]), src.dtype)
            backend.copy_rows(buf, src)
            pad_rows(backend, buf, src.shape[0], self.pad_value, self.pad_mode)
            self.call_args[index] = buf
            self.static_inputs.append(buf)
        for index in request.copied:
            src = args[index]
            buf = self.arena.view(backend, index, tuple(src.shape), src.dtype)
            backend.copy_rows(buf, src)
            self.call_args[index] = buf
            self.whole_inputs.append(buf)
        self.positions = [*request.batched, *request.copied]
        # What the copies held before the function ran: a function that writes into them would,
        # under a graph, write into the static copy while the caller's array keeps its values.
        self.snapshots = [backend.copy_out(buf) for buf in self.static_inputs + self.whole_inputs]

    def written(self) -> list[int]:
        """Static buffers (by index in static_inputs + whole_inputs) the warm-ups changed."""
        return changed(self.backend.xp, self.static_inputs + self.whole_inputs, self.snapshots)

    def close(self) -> None:
        """Let go of everything still held here; a recording no entry took is released."""
        if self.recording is not None:
            self.recording.release()
        self.recording = None
        self.call_args, self.static_inputs, self.whole_inputs, self.snapshots = [], [], [], []


@contextmanager
def _memory_refusal_fails_capture(descriptor: BatchDescriptor) -> Iterator[None]:
    """The family's pool (or the device) refusing the static buffers or a warm-up allocation fails
    the capture, like an allocation refused during capture: the key runs eagerly."""
    try:
        yield
    except MemoryError as err:
        raise CaptureError(
            f"{FallbackReason.OUT_OF_MEMORY.text}: the static buffers or warm-up of the graph for {descriptor}: {err}"
        ) from err


def _drop_frame_locals(err: Optional[BaseException]) -> None:
    """Clear the locals of the finished frames in ``err``'s tracebacks (and its causes')."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        err = err.__cause__ or err.__context__


# Non-array outputs a graph can return as they were at capture: values that do not come from the
# data (a host read from the data is refused at capture). Any other object is refused, because its
# contents, arrays included, would be the capture's on every replay.
_STATIC_OUTPUT_TYPES = (bool, int, float, complex, str, bytes, slice, range, type, enum.Enum, np.generic, np.dtype)


def check_outputs(outputs: Any, is_array: Callable[[Any], bool]) -> None:
    leaves, _ = flatten(outputs, is_array)
    for i, leaf in enumerate(leaves):
        if is_array(leaf) or isinstance(leaf, _STATIC_OUTPUT_TYPES):
            continue
        raise CaptureError(
            f"{FallbackReason.UNSUPPORTED_OUTPUT.text}: output {i} is a {type(leaf).__module__}."
            f"{type(leaf).__qualname__}, which a replay would return as it was at capture; return arrays in "
            "tuples, lists, dicts, namedtuples or dataclasses, and only plain values that depend on shapes"
        )
