"""The product: record a function with CuPy stream capture and replay it with one ``Graph.launch()``.

Imported only when a GPU backend is asked for, so ``import cupygraph`` works without CuPy.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import cupy

from ...errors import CaptureError
from ...pytree import flatten, unflatten
from ..base import Backend
from ..capturing import stream_is_capturing
from ..driver.reading import ConditionalBodyCheck, RecordingGraphs
from ..graph_bodies import collecting_bodies
from ..graph_breaks import recording_breaks
from ..guards.cupy_audit import audit_capture, audit_enabled
from ..guards.cupy_legacy_random import legacy_random_refused
from ..guards.cupy_uploads import intercepted_uploads
from ..guards.foreign import find_arrays
from ..holding import collecting_held
from ..pdl.discovery import is_kernel_object
from ..pdl.rewrite import apply_pdl
from ..relay import NO_RELAY, RelayRequest, relayed_fingerprints
from ..zerocopy.binder import CupyBinder
from ..zerocopy.node_pointers import find_node_pointers_safely, make_extent_recorder
from .executable_memory import ExecutableMemory
from .failures import describe_capture_failure
from .fft import isolated_plan_cache
from .fingerprint import fingerprint as device_fingerprint
from .pieces import MEMCPY_D2D, PiecewiseRecorder, end_piece
from .pool import DeviceBlocks, fill_free_blocks
from .recording import CupyRecording
from .relayed import check_warmup, copy_reasons, landings_of, relayed, relayed_addresses
from .timing import EventSample

_runtime = cupy.cuda.runtime
_current_stream = cupy.cuda.get_current_stream
_CAPTURE_MODES = {
    "global": _runtime.streamCaptureModeGlobal,
    "thread_local": _runtime.streamCaptureModeThreadLocal,
    "relaxed": _runtime.streamCaptureModeRelaxed,
}

# One capture at a time per device: a capture in global mode makes other threads' unsafe CUDA
# calls fail, and interleaved captures on one device would share the pool's free blocks.
_device_locks: dict[int, threading.Lock] = {}
_device_locks_guard = threading.Lock()


def _capture_lock(device_id: int) -> threading.Lock:
    with _device_locks_guard:
        return _device_locks.setdefault(device_id, threading.Lock())


@contextmanager
def _frozen_gc(enabled: bool) -> Iterator[None]:
    """No garbage collection during capture: a finaliser freeing CUDA memory mid-capture can
    hand a block the graph still uses to someone else."""
    if not enabled:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()



class CupyBackend(Backend):
    """CuPy stream capture on a private non-blocking stream, one memory pool per graph family.

    Contract: warm-ups and capture allocate from this family's private pool, so the blocks a graph
    reads or writes are only ever reused by other captures of the same family (whose replays are
    ordered on the caller's stream), never handed to other code. Replays run on the caller's
    current stream; when consecutive calls come on different streams, the new stream first waits
    for the old one, because the family's graphs share static buffers and scratch.
    """

    name = "cupy"
    xp = cupy
    array_type = cupy.ndarray
    has_pool = True

    def __init__(self, device: Optional[int] = None):
        self.device_id = cupy.cuda.Device(device).id
        self.per_device = _runtime.getDeviceCount() > 1
        """With one visible GPU every array is on it: the hot path then skips the device check."""
        self._blocks = DeviceBlocks()
        with cupy.cuda.Device(self.device_id):
            self.pool = cupy.cuda.MemoryPool(self._blocks.allocate)
            self._capture_stream = cupy.cuda.Stream(non_blocking=True)
        self._last_stream: Any = None
        self.warned: set[str] = set()
        """Foreign memory already reported for this family (one warning each, not one per size)."""

    def is_array(self, value: Any) -> bool:
        return isinstance(value, cupy.ndarray)

    def device_of(self, array: Any) -> int:
        # The memory pointer's device: two attribute reads, cheap enough for the hot path.
        return int(array.data.device_id)

    def on_device(self, device: int) -> CupyBackend:
        return CupyBackend(device)

    def address(self, array: Any) -> int:
        return int(array.data.ptr)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        with cupy.cuda.Device(self.device_id), cupy.cuda.using_allocator(self.pool.malloc):
            return cupy.empty(shape, dtype=dtype)

    def order_after_last_use(self) -> Any:
        stream = _current_stream()
        last = self._last_stream
        if last is not stream:
            if last is not None and last.ptr != stream.ptr:
                stream.wait_event(last.record())
                self.family.bump()  # a record expects calls on the last stream: that changed
            self._last_stream = stream
        return stream.ptr

    def last_stream_ptr(self) -> Optional[int]:
        """The stream of the family's last replay (what a compiled record expects calls on), or None."""
        last = self._last_stream
        return None if last is None else int(last.ptr)

    def copy_rows(self, dst: Any, src: Any, stream: Any = None) -> None:
        nbytes = src.nbytes
        if nbytes == 0:
            return
        if src._c_contiguous:
            # One async memcpy instead of an elementwise kernel: cheaper to issue, no launch config.
            _runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, MEMCPY_D2D,
                                 cupy.cuda.get_current_stream().ptr if stream is None else stream)
        else:
            dst[: src.shape[0]] = src

    def fill_rows(self, dst: Any, start: int, value: Any, stream: Any = None) -> None:
        tail = dst[start:]
        if tail.size == 0:
            return
        if value == 0:
            _runtime.memsetAsync(tail.data.ptr, 0, tail.nbytes,
                                 cupy.cuda.get_current_stream().ptr if stream is None else stream)
        else:
            tail.fill(value)

    def fingerprint(self, array: Any) -> Any:
        return device_fingerprint(array)  # a hash on the device: no copy of the array

    def copy_out(self, array: Any, stream: Any = None) -> Any:
        if array._c_contiguous:
            out = cupy.empty(array.shape, dtype=array.dtype)
            if array.nbytes:
                _runtime.memcpyAsync(out.data.ptr, array.data.ptr, array.nbytes, MEMCPY_D2D,
                                     cupy.cuda.get_current_stream().ptr if stream is None else stream)
            return out
        return array.copy()

    def capture(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], *,
        num_warmups: int, capture_mode: str, gc_freeze: bool, piecewise: bool = False, pdl: str = "auto",
        bind: bool = True, relay: RelayRequest = NO_RELAY,
    ) -> CupyRecording:
        request = relay if bind and not piecewise and num_warmups > 0 else NO_RELAY
        options: dict[str, Any] = dict(num_warmups=num_warmups, capture_mode=capture_mode, gc_freeze=gc_freeze,
                                       piecewise=piecewise, pdl=pdl, bind=bind)
        if self.relays.first(request):
            try:
                return self._capture(fn, args, kwargs, relay=request, **options)
            except (CaptureError, MemoryError):  # it writes an argument, or the relays cost the capture: none again
                self.relays.give_up()
        before = self._relayed_fingerprints(args, request) if self.relays.decided is None else None
        recording = self._capture(fn, args, kwargs, relay=NO_RELAY, **options)
        if before and before != self._relayed_fingerprints(args, request):
            # Its warm-ups wrote an argument. Relayed warm-ups would start from the written values and could
            # see no change (an idempotent write: a clip, a fill), then hide every later write in a copy.
            self.relays.give_up()
            return recording
        leaves = flatten(recording.outputs, self.is_array)[0]
        if not self.relays.retry(request, copy_reasons(recording.bindings, args, leaves, request)):
            return recording
        try:  # the same capture again with relays, so that calls can bind what it copied
            again = self._capture(fn, args, kwargs, relay=request, **options)
        except (CaptureError, MemoryError):  # WritesArguments, or a failure the relays brought: keep the first
            self.relays.give_up()
            return recording
        recording.release()
        return again

    def _relayed_fingerprints(self, args: Sequence[Any], request: RelayRequest) -> list[Any]:
        with cupy.cuda.Device(self.device_id):  # the family's device, whichever is current
            return relayed_fingerprints(self, args, request)

    def _capture(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], *,
        num_warmups: int, capture_mode: str, gc_freeze: bool, piecewise: bool, pdl: str, bind: bool,
        relay: RelayRequest,
    ) -> CupyRecording:
        mode = _CAPTURE_MODES[capture_mode]
        call = relayed(fn, relay)
        caller = cupy.cuda.get_current_stream()
        stream = self._capture_stream
        with _capture_lock(self.device_id), cupy.cuda.Device(self.device_id):
            # The capture stream must see everything the caller enqueued (the static inputs' copies).
            stream.wait_event(caller.record())
            try:
                before = self._blocks.nbytes
                executables = ExecutableMemory(self._blocks)
                held: list[Any] = []
                # The function's own cuFFT plan cache: its plans get their work areas from this pool
                # and live as long as the recording, whatever happens to CuPy's cache.
                # cuBLAS workspaces/handles and RNG states used by the graph join ``held`` (holding.py).
                # Legacy cupy.random is routed (routes/cupy_random.py) or refused before it draws, in the
                # warm-ups too (cupy_legacy_random).
                with cupy.cuda.using_allocator(self.pool.malloc), stream, isolated_plan_cache(held), \
                        collecting_held(held), collecting_bodies() as bodies, intercepted_uploads(fn) as uploads, \
                        legacy_random_refused(fn):
                    sample = None
                    for _ in range(num_warmups):
                        sample = EventSample()  # the last run's: the first may compile kernels, make plans
                        call(*args, **kwargs)
                        sample.stop()
                        check_warmup(call)  # a function that writes into an argument gets no relays
                    extents: list[tuple[int, int]] = []
                    bodies_checked = ConditionalBodyCheck(bodies)  # before each piece is instantiated
                    with cupy.cuda.using_allocator(make_extent_recorder(self.pool.malloc, extents)):
                        with executables.window():  # CuPy's end_capture instantiates
                            steps, outputs = self._record(call, args, kwargs, stream, mode, gc_freeze, piecewise,
                                                          bodies_checked)
                # After the guards above had their say (a refusal the function swallowed raises as they
                # close): PDL's executables are owned by no one until the recording is made below.
                # The graphs are read once; PDL, zero-copy and the audit all use this reading.
                snapshots = RecordingGraphs(steps, bodies, needed=pdl == "auto" or bind or audit_enabled(),
                                            known=bodies_checked.read)
                with executables.window():
                    pdl_summary, replaced = apply_pdl(
                        steps, snapshots.tops, snapshots.bodies, pdl, self.device_id, getattr(fn, "__name__", "graph"),
                        # the RawKernels/RawModules the function reaches: where PDL looks first for a kernel's source
                        lambda: [found.array for found in find_arrays(fn, is_kernel_object, args=args)])
                leaves = flatten(outputs, self.is_array)[0]
                bindings = find_node_pointers_safely(
                    steps, snapshots.tops, args, leaves, extents, held, self.device_id,
                    relayed_addresses(args, leaves, relay)) if bind else None
                if self._last_stream is None or self._last_stream.ptr != caller.ptr:
                    self.family.bump()  # a record expects calls on the last stream: that changed
                self._last_stream = caller
                outputs = self._detach(outputs)  # (after the zero-copy facts: they read the outputs' allocations)
                recording = CupyRecording(steps, outputs, self._blocks.nbytes - before, held, replaced, self.family,
                                          functools.partial(CupyBinder, owns=self.owns))
                with executables.window():
                    recording.upload(stream)  # so the first replay costs what the others do
                recording.executable_bytes, recording.executable_source = executables.nbytes, executables.source
                recording.warmup_sample = sample
                recording.pdl = pdl_summary
                recording.baked_uploads = tuple(uploads.baked)  # host uploads as constants (cupy_uploads)
                recording.bindings = bindings
                recording.relay_landings = landings_of(call)
                recording.graphs = snapshots
                audit_capture(self, recording, snapshots.all, fn, args, kwargs, unread=snapshots.problem)
                return recording
            finally:
                # The caller's next work waits for the capture stream's, whether the capture worked or
                # not: a failed capture's warm-ups may still be writing into arrays the eager call reads.
                caller.wait_event(stream.record())

    def _detach(self, outputs: Any) -> Any:
        """The outputs as views that do not hold their pool blocks.

        An output is consumed before the next call of the family (copied out, or a view valid
        until then), so later captures may reuse its block like any intermediate's: the memory of
        a family grows with its largest graph, not with the sum of its graphs' outputs. Each view
        keeps the underlying device block alive for as long as a caller holds it.
        """
        leaves, spec = flatten(outputs, self.is_array)
        detached = []
        for leaf in leaves:
            block = self._blocks.owner_of(leaf.data.ptr) if self.is_array(leaf) and leaf.nbytes else None
            if block is None:
                detached.append(leaf)
                continue
            ptr = leaf.data.ptr
            memory = cupy.cuda.UnownedMemory(ptr, block.ptr + block.size - ptr, block)
            detached.append(cupy.ndarray(leaf.shape, leaf.dtype, cupy.cuda.MemoryPointer(memory, 0), leaf.strides))
        del leaves
        return unflatten(spec, detached)

    def _record(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], stream: Any, mode: int,
                gc_freeze: bool, piecewise: bool, bodies: ConditionalBodyCheck) -> tuple[list[Any], Any]:
        error: Optional[BaseException] = None
        steps: list[Any] = []
        outputs = None
        breaks = recording_breaks(PiecewiseRecorder(stream, mode, steps, bodies)) if piecewise else nullcontext()
        with _frozen_gc(gc_freeze), breaks:
            stream.begin_capture(mode)
            try:
                outputs = fn(*args, **kwargs)
            except BaseException as err:  # the capture must end whatever happened
                error = err
            finally:
                if stream_is_capturing(stream):
                    try:
                        steps.append(end_piece(stream, bodies) if error is None else stream.end_capture())
                    except Exception as end_err:
                        if error is None:
                            error = end_err
        if error is not None:
            steps.clear()
            outputs = None
            if isinstance(error, CaptureError):
                raise error
            reason = describe_capture_failure(error)
            if reason is None:
                raise error
            raise CaptureError(reason) from error
        return steps, outputs

    def start_sample(self) -> EventSample:
        return EventSample()

    def pool_bytes(self) -> int:
        """Device bytes this family holds (what its pool asked the driver for)."""
        return int(self._blocks.nbytes)

    def owns(self, ptr: int) -> bool:
        """Whether device address ``ptr`` lies in this family's pool memory."""
        return self._blocks.owner_of(ptr) is not None

    def pool_regions(self) -> list[tuple[int, int]]:
        """(address, size) of every device block behind this family's pool."""
        return self._blocks.regions()

    def poison_free_memory(self, value: int) -> int:
        """Testing: fill the pool's free blocks with byte ``value``; return the bytes filled.

        Free blocks hold only scratch a replay rewrites before reading (intermediates, outputs
        already consumed), so a graph that relies on their old contents shows up. No new device
        memory is taken. Not to be called while a replay of this family is being enqueued.
        """
        with _capture_lock(self.device_id), cupy.cuda.Device(self.device_id):
            # The capture stream's arena: the one warm-ups and captures allocate from.
            return fill_free_blocks(self.pool, self._blocks, self._capture_stream, value)

    def release_memory(self) -> None:
        # Arrays of the family may sit in reference cycles (closures, tracebacks): collect them
        # first so their blocks are free when the pool hands its memory back.
        gc.collect()
        self.pool.free_all_blocks()
        self._blocks.release()

    def synchronize(self) -> None:
        cupy.cuda.Device(self.device_id).synchronize()
