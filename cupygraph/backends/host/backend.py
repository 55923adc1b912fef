"""The NumPy reference backend: same static buffers and padding as the GPU, no CUDA graphs.

It exists so everything above the backends runs for real where no GPU is present (CPU CI,
laptops): a "replay" re-executes the function on the static buffers and writes the results into
the buffers the capture returned, so view and copy semantics match the GPU backend's. It never
claims to have captured a CUDA graph (``name == "host"``).

It refuses what the GPU cannot capture (``host_guard``): the capture run sees its buffers as
arrays that refuse host reads, data-dependent shapes and cuBLAS/cuSOLVER calls. A replay that
returns another structure, shapes or Python values than the capture raises ``ReplayMismatch``
(the front door then runs that key eagerly): a stale result is never returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from ...pytree import flatten, same_value, unflatten
from ..base import Backend, Recording, ReplayMismatch
from ..guards.foreign import find_arrays, watch_unowned
from ..guards.host_escapes import legacy_random_refused, numpy_escapes_refused
from ..guards.host_guard import CaptureArray, guarded, refusing
from ..guards.host_uploads import intercepted_uploads, replaying
from ..relay import NO_RELAY, RelayRequest, carries, relayed_fingerprints, relayed_positions
from ..routing import Reopen, recorded_routing
from ..timing import HostSample
from .binder import HostBinder, host_facts


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _plain_outputs(outputs: Any) -> Any:
    """The capture's outputs with every CaptureArray as a plain view and NumPy scalars as 0-d arrays."""
    leaves, spec = flatten(outputs, _is_numpy)
    return unflatten(spec, [
        leaf.view(np.ndarray) if isinstance(leaf, CaptureArray)
        else np.asarray(leaf) if isinstance(leaf, np.generic) else leaf
        for leaf in leaves
    ])


def _scalar_leaves(warmed: Any, captured: Any) -> frozenset[int]:
    """The output leaves the plain function returns as NumPy scalars (a reduction, ``x.sum()``).

    The capture run cannot tell: its arrays keep 0-d results arrays, so that a later ``float()`` is
    refused. A warm-up ran the plain function, so its outputs say; without one, a 0-d result of the
    capture run is taken for a scalar (what NumPy gives for reductions), and the first replay that
    disagrees drops the graph (``HostRecording.launch``)."""
    leaves, _ = flatten(captured, _is_numpy)
    if warmed is not None:
        plain, _ = flatten(warmed, _is_numpy)
        if len(plain) == len(leaves):
            return frozenset(i for i, leaf in enumerate(plain) if isinstance(leaf, np.generic))
    return frozenset(i for i, leaf in enumerate(leaves) if isinstance(leaf, np.generic)
                     or (isinstance(leaf, CaptureArray) and leaf.ndim == 0))


@contextmanager
def _undone(arrays: Iterable[np.ndarray]) -> Iterator[None]:
    """Whatever the block writes into ``arrays`` is undone when it ends (also when it raises)."""
    saved: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for array in arrays:
        if array.flags.writeable and id(array) not in saved:
            saved[id(array)] = (array, array.copy())
    try:
        yield
    finally:
        for array, before in saved.values():
            np.copyto(array, before)


class HostRecording(Recording):
    executable_source = "none: the host backend makes no executable (a replay runs the function again)"

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], outputs: Any,
                 piecewise: bool = False, scalars: frozenset[int] = frozenset(), routing: Reopen = nullcontext):
        self._fn, self._args, self._kwargs = fn, list(args), kwargs
        self._routing = routing
        """Routes the library calls as the capture did (``routing.recorded_routing``): a replay runs the
        function again, where a GPU graph replays the routed calls it captured."""
        self.outputs = outputs
        self.scalar_outputs = scalars
        self._leaves, self._spec = flatten(outputs, _is_numpy)
        self.nbytes = sum(leaf.nbytes for leaf in self._leaves if _is_numpy(leaf))
        self._piecewise = piecewise
        self._snapshots: list[Any] = []
        self.library_state = False
        """Whether the GPU's recording of the same run would hold library state (set by the capture):
        the GPU then binds nothing (``CopyReason.LIBRARY_STATE``) but what it relays, nor does this one."""
        self.relayed = NO_RELAY
        """The arguments and outputs the GPU would relay (``backends/relay.py``): bound here too, and the
        function replayed on internal copies of those arguments, as the GPU's relays copy them."""

    def bake(self, snapshots: list[Any], baked: Sequence[Any]) -> None:
        """Host uploads baked in at capture: every replay gets these snapshots again (issue 20)."""
        self._snapshots, self.baked_uploads = list(snapshots), tuple(baked)
        self.nbytes += sum(s.nbytes for s in snapshots)

    def _run(self) -> Any:
        args = self._args
        if self.relayed.positions:
            # As the GPU's relays: the function reads and writes internal copies of these arguments, so a
            # write the capture did not see reaches neither the static buffer nor the caller's array.
            args = list(args)
            for p in relayed_positions(args, self.relayed, _is_numpy):
                landing = self.relay_landings[p]
                np.copyto(landing, args[p])
                args[p] = landing
        with self._routing():
            if not self._snapshots:
                return self._fn(*args, **self._kwargs)
            # Guarded (inactive) views, as at capture: the function's own arrays are not uploads.
            with replaying(self._snapshots, self._fn):
                return self._fn(*[guarded(a) for a in args], **self._kwargs)

    def binder(self, static: Sequence[Any], labels: Sequence[str], leaves: Sequence[Any], *, bind_outputs: bool,
               counts: Any, name: str, constants: Sequence[tuple[int, Any]] = (), executables: int = 1) -> HostBinder:
        # A scalar output is no array the caller could be handed: never bound.
        leaves_bound = [None if i in self.scalar_outputs else leaf for i, leaf in enumerate(self._leaves)]
        facts = host_facts(self._args, leaves_bound, self._piecewise, self.library_state, self.relayed)
        return HostBinder(self._args, facts, static, labels, leaves, bind_outputs, counts, name, constants)

    def launch(self) -> None:
        fresh, spec = flatten(self._run(), _is_numpy)
        if self._fn is None:  # released while the function ran (it cleared its graphs, or evicted this one)
            raise ReplayMismatch("the graph was dropped (clear(), an eviction) while its replay ran the function")
        if spec != self._spec or len(fresh) != len(self._leaves):
            raise ReplayMismatch(
                f"the function returned another output structure on replay than at capture ({len(fresh)} "
                f"outputs, {len(self._leaves)} at capture); a graphed function must return the same structure "
                "every call"
            )
        scalars = self.scalar_outputs
        for i, (static, new) in enumerate(zip(self._leaves, fresh)):
            if not _is_numpy(static):
                if not same_value(static, new):
                    raise ReplayMismatch(
                        f"output {i} is {type(new).__name__} {new!r} on replay but was {static!r} at capture; "
                        "a graph would have returned the capture's value (a value from Python state or the data)"
                    )
                continue
            if new is static:
                continue
            if (type(new) is not np.ndarray or scalars) and isinstance(new, np.generic) is not (i in scalars):
                raise ReplayMismatch(
                    f"output {i} is a {'NumPy scalar' if isinstance(new, np.generic) else type(new).__name__} on "
                    f"replay but was {'a NumPy scalar' if i in scalars else 'an array'} at capture; "
                    "a graphed function must return the same types every call"
                )
            new = np.asarray(new)
            if new.shape != static.shape or new.dtype != static.dtype:
                raise ReplayMismatch(
                    f"output {i} is {new.dtype}{list(new.shape)} on replay but was "
                    f"{static.dtype}{list(static.shape)} at capture; outputs must keep their shape and dtype"
                )
            np.copyto(static, new)

    def release(self) -> None:
        # None, not a Callable: a released recording is never launched again.
        self._fn, self._args, self._kwargs, self._leaves, self.outputs = None, [], {}, [], None  # type: ignore[assignment]
        self._routing = nullcontext
        self._snapshots = []
        self.watches = ()

    def to_dot(self) -> str:
        name = getattr(self._fn, "__qualname__", "function")
        return f'digraph host {{ label="host backend: no CUDA graph"; "{name}" [shape=box]; }}'


class HostBackend(Backend):
    """NumPy arrays, eager re-execution on replay; the reference for machines without a GPU."""

    name = "host"
    xp = np
    array_type = np.ndarray

    def is_array(self, value: Any) -> bool:
        return _is_numpy(value)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def copy_rows(self, dst: np.ndarray, src: np.ndarray, stream: Any = None) -> None:
        if src.ndim:
            dst[: src.shape[0]] = src
        else:  # a 0-d unbatched array argument: no rows, copied whole
            dst[...] = src

    def fill_rows(self, dst: np.ndarray, start: int, value: Any, stream: Any = None) -> None:
        dst[start:] = value

    def copy_out(self, array: np.ndarray, stream: Any = None) -> np.ndarray:
        return array.copy()

    def capture(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], *,
        num_warmups: int, capture_mode: str, gc_freeze: bool, piecewise: bool = False, pdl: str = "auto",
        bind: bool = True, relay: RelayRequest = NO_RELAY,
    ) -> HostRecording:
        # ``pdl`` and ``bind`` are accepted and unused: a host recording re-executes the function and
        # has no graph edges to make programmatic (the edge decision itself is tested on
        # descriptions), and reads its binding facts only when a binder is asked for.
        # Host uploads go through the ledger (``host_uploads``), as on the GPU.
        with intercepted_uploads(fn) as uploads:
            sample = warmed = None
            # Legacy np.random: routed where the GPU routes it, else refused before it draws (the GPU could
            # not give a warm-up's draws back).
            request = relay if bind and not piecewise and num_warmups > 0 and self.relays.decided is not False \
                else NO_RELAY
            # As the GPU: only the arrays a relay would carry are compared (a larger one is copied, and its
            # writes reach the caller through the write-back).
            before = relayed_fingerprints(self, args, request)
            with legacy_random_refused(fn):
                for _ in range(num_warmups):
                    sample = HostSample()  # the last run's: the first may pay for one-time setup
                    warmed = fn(*args, **kwargs)
                    sample.stop()
            reached = find_arrays(fn, _is_numpy, args=args)
            touched = [leaf for value in (*args, *kwargs.values()) for leaf in flatten(value, _is_numpy)[0]
                       if _is_numpy(leaf)] + [found.array for found in reached]
            # A CUDA stream capture executes nothing: what the capture run writes into the arrays it can
            # reach is undone, so only replays write there, as on the GPU (else an in-place function
            # would change the caller's arrays twice on a first call: capture run, then replay).
            # The capture run sees views of the same buffers that refuse what CuPy refuses under capture.
            with _undone(touched), refusing(piecewise) as run, numpy_escapes_refused(fn):
                outputs = fn(*[guarded(a) for a in args], **kwargs)
        # Outputs are plain arrays; NumPy scalars become 0-d arrays (rewritten in place, as CuPy's), which
        # the entry hands back as the scalars the plain function returns.
        recording = HostRecording(fn, args, kwargs, _plain_outputs(outputs), piecewise,
                                  _scalar_leaves(warmed, outputs), recorded_routing())
        warmed = None
        recording.warmup_sample = sample
        recording.bake(uploads.snapshots, uploads.ledger.baked)
        # The GPU's recording holds library state (handles, generators, plans, baked uploads' snapshots):
        # it binds nothing then (zerocopy/node_pointers.py, LIBRARY_STATE), and neither does this one.
        recording.library_state = run.library_state or bool(uploads.ledger.baked)
        # Relays where the GPU puts them (``backends/relay.py``): its copies there are what a library saw,
        # so the arguments and outputs bind; never for a function whose warm-ups wrote into an argument.
        relays_carry = bool(before) or (request.outputs and any(carries(leaf, _is_numpy) for leaf in recording._leaves))
        if before != relayed_fingerprints(self, args, request):
            self.relays.give_up()
        elif self.relays.first(request) or self.relays.retry(
                request, ["library_state"] if recording.library_state and relays_carry else []):
            recording.relayed = request
            recording.relay_landings = {p: args[p].copy() for p in relayed_positions(args, request, _is_numpy)}
        # What the GPU backend's audit reports, the reference reports too (warning, debug checks).
        # One warning per array and family (set here: subclasses need not call an __init__).
        warned = self.__dict__.setdefault("_foreign_warned", set())
        recording.watches = watch_unowned(fn, args, kwargs, _is_numpy, np.may_share_memory, warned, reached)
        return recording

