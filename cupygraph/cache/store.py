"""The graph cache: what a call of a key does, in one call on a miss; capture-after, failed keys, capture.

``GraphStore`` is the one cache every front door uses (``CUDAGraphRegistry`` is it, with the seed's
batch-size API and the dispatcher's registered graphs on top): ``jit``, ``CUDAGraphManager``, the
vLLM-style wrappers and ``CudagraphDispatcher`` keep no graphs of their own. On a miss a front door
makes one call, ``find_or_capture(key, request)``: the entry held, the held graph rebound to new
constant arrays, a capture now, or why the call runs eagerly (a cold key under ``capture_after``,
a key whose capture failed). What it holds and evicts is ``HeldGraphs``'s (``held.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, Protocol, Union, overload

from ..backends.base import Backend, ReplayMismatch
from ..config.model import CUDAGraphConfig
from ..errors import CaptureError, CupyGraphError
from ..logs import logger
from ..reasons import EvictionReason, FallbackReason
from .checks.freshness import issue
from .entry import CUDAGraphEntry
from .failures import Eager, FailedKeys, cold_key
from .first_call import FirstCall, capture_after_running, padded_call
from .held import HeldGraphs
from .instruments.hooks import Instruments
from .key import ConstArg, GraphKey
from .padding import check_pad_value
from .recording import CaptureRequest, record


class CaptureNow:
    """``verdict_for``'s answer for a key to capture now (its singleton is ``CAPTURE_NOW``)."""

    def __repr__(self) -> str:
        return "CAPTURE_NOW"


CAPTURE_NOW = CaptureNow()

Verdict = Union[CUDAGraphEntry, Eager, CaptureNow]
"""What a call of a key does: replay the entry, run eagerly (and why), or capture now."""


class CaptureWatch(Protocol):
    """What a front door is told during ``find_or_capture`` (``jit``'s is ``api/recaptures.py``)."""

    def bound(self, key: GraphKey) -> None:
        """``key``'s new constant arrays were bound to a held graph instead of a capture."""

    def before_capture(self, key: GraphKey, held: list[CUDAGraphEntry]) -> None:
        """``key`` is about to be captured, beside the entries ``held``; may raise to refuse the call."""


class GraphStore(HeldGraphs):
    """The graph cache of one graph family: its held graphs (``HeldGraphs``), and what a call of a key does.

    Contract: lookups are thread-safe and never wait for a capture; captures are serialised per
    store (and per device by the backend). A key whose capture failed is remembered, with why, until
    ``clear()``: its calls run eagerly (or raise under ``on_capture_error="raise"``) without a new
    capture.
    """

    def __init__(self, config: Optional[CUDAGraphConfig] = None, backend: Optional[Backend] = None):
        super().__init__(config, backend)
        self.instruments = Instruments(self.config, self.backend)
        """Replay timing and NVTX ranges, on or off for this cache's life (``cache/instruments/hooks.py``)."""
        self._failed = FailedKeys(self.config.on_capture_error, self.config.pad_value, self.config.pad_mode)

    # -- what a call does ---------------------------------------------------------------------------

    @overload
    def find_or_capture(
        self, key: GraphKey, request: CaptureRequest, *, name: str, force: bool = False,
        watch: Optional[CaptureWatch] = None, rows: None = None,
    ) -> tuple[Union[CUDAGraphEntry, Eager], bool]: ...

    @overload
    def find_or_capture(
        self, key: GraphKey, request: CaptureRequest, *, name: str, force: bool = False,
        watch: Optional[CaptureWatch] = None, rows: int,
    ) -> tuple[Union[CUDAGraphEntry, Eager, FirstCall], bool]: ...

    def find_or_capture(
        self, key: GraphKey, request: CaptureRequest, *, name: str, force: bool = False,
        watch: Optional[CaptureWatch] = None, rows: Optional[int] = None,
    ) -> tuple[Union[CUDAGraphEntry, Eager, FirstCall], bool]:
        """What serves a call of ``key`` (``request``: the call), as (the entry, whether it was captured
        now) or (why the call runs eagerly, False): the one call a front door makes on a miss.

        In order: the verdict (``verdict_for``: the entry held, a failed or cold key); a held graph that
        differs from ``key`` only in where its constants live, pointed at this call's constants
        (``input_binding="auto"``); else, once ``pad_value`` is known to fit the batched arguments and
        ``watch`` was told, a capture (``capture_or_fail``). ``rows``: the real rows of a user's call,
        which runs the function as it is (``first_call.py``) where it captures its key (then a
        ``FirstCall``, True) or is the key's first padded call. The caller holds the family lock.
        """
        verdict = self.verdict_for(key, force=force, name=name)
        if isinstance(verdict, Eager):
            return verdict, False
        if isinstance(verdict, CaptureNow):
            rebound = self._bind_new_constants(key, request.args, name)
            if rebound is None:
                check_pad_value(request.args, request.batched, self.config.pad_value, name)
                if watch is not None:
                    watch.before_capture(key, self.entries())
                if rows is not None:  # a user's call runs as it is, then captures: the graph serves the next calls
                    return capture_after_running(self, key, request, rows, name), True
                captured = self.capture_or_fail(key, request, name=name)
                return captured, isinstance(captured, CUDAGraphEntry)
            if watch is not None:
                watch.bound(key)
            verdict = rebound
        if rows is not None and request.batched and rows != verdict.padded:  # its outputs' cut, checked once
            return padded_call(self, verdict, request, rows, name), False
        return verdict, False

    def verdict_for(self, key: GraphKey, *, force: bool = False, name: str = "the function") -> Verdict:
        """What a call of ``key`` does now, decided in one place for every front door.

        The entry held (marked most recently used) when there is one; ``Eager`` when the key
        failed before, or is cold (seen fewer than ``capture_after`` times, counted here; ``force``
        skips that, as ``warmup`` does); else ``CAPTURE_NOW``. Under ``on_capture_error="raise"``
        a key refused before raises ``CaptureError`` naming ``name``.
        """
        with self._lock:
            failed = self._failed.check(key, name)
            if failed is not None:
                return failed
            entry = self.lookup(key)
            if entry is not None:
                return entry
            seen = self._seen[key] + 1
            if not force and seen < self.config.capture_after:
                self._seen[key] = seen
                return cold_key(seen, self.config.capture_after)
            # Not counted: the call that captures counts this sighting (``count_sighting``), or a failure does.
            return CAPTURE_NOW

    def _bind_new_constants(self, key: GraphKey, args: Sequence[Any], name: str) -> Optional[CUDAGraphEntry]:
        """The held graph that differs from ``key`` only in where its constants live, now reading this
        call's constant arrays (``CUDAGraphEntry.rebind_constants``) and held under ``key``, which always
        names the arrays its graph reads; None where there is none or its nodes cannot be re-pointed.
        Counted as a bind of each constant argument, not as a re-capture."""
        consts = key.signature.constants()
        if not consts or self.config.input_binding != "auto":
            return None
        rest = key.without_constants()
        layout = [(c.shape, c.dtype, c.strides) for c in consts]
        positions = [i for i, part in enumerate(key.signature.args) if isinstance(part, ConstArg)]
        for entry in self.entries():
            held = entry.key
            if (held.without_constants() != rest
                    or [(c.shape, c.dtype, c.strides) for c in held.signature.constants()] != layout):
                continue
            if entry.rebind_constants([(i, args[i]) for i in positions]):
                self.rekey(entry, key)
                logger.info("%s() binds new constant argument(s) %s to its graph for %s instead of re-capturing",
                            name, positions, key.descriptor)
                return entry
        return None

    def capture_or_fail(self, key: GraphKey, request: CaptureRequest, *, name: str) -> Union[CUDAGraphEntry, Eager]:
        """Capture ``request`` for ``key``; when it cannot be graphed, remember the key as failed and
        say why it runs eagerly (or raise, for a refusal under ``on_capture_error="raise"``).

        Errors in the call itself (a ``CupyGraphError`` other than ``CaptureError``: an argument or
        declaration that does not fit) propagate and are not remembered.
        """
        try:
            return self._capture(key, request)
        except CaptureError as err:
            failure: Exception = err
        except CupyGraphError:
            raise
        except Exception as err:
            failure = err
        with self._lock:
            self._seen[key] += 1  # the sighting that tried to capture
            return self._failed.capture_failed(key, failure, name, request.fn, request.rows)

    def replay_failed(self, entry: CUDAGraphEntry, err: ReplayMismatch, *, name: str) -> Eager:
        """A replay returned other outputs than its capture: drop the graph, run the key eagerly. An entry
        already dropped during its own replay (the function cleared its graphs, a capture it made evicted
        this one) is no failure of the key: this call runs eagerly, the next one captures again."""
        if not entry.alive:
            return Eager(FallbackReason.REPLAY_MISMATCH, str(err))
        self.evict(entry.key, EvictionReason.FAILED_REPLAY, str(err))
        with self._lock:
            return self._failed.replay_failed(entry.key, err, name)

    def run_tracking_views(self, entry: CUDAGraphEntry, inputs: Sequence[Any], rows: int, whole: Sequence[Any],
                           *, name: str) -> Any:
        """``entry.run`` for debug mode: the launch rewrites the family's static outputs, so every view
        handed out before goes stale; under ``output_mode="view"`` the new outputs are tagged, so a
        read after their own rewrite raises ``StaleOutputError`` (see ``check_fresh``)."""
        self._view_epoch.bump()
        out = entry.run(inputs, rows, whole)
        if self.config.output_mode == "view":
            out = issue(out, self._view_epoch, self.backend.is_array, name)
        return out

    @property
    def raises(self) -> bool:
        """Whether failures raise (``on_capture_error="raise"``) instead of falling back."""
        return self._failed.raises

    def forget_failures(self) -> None:
        """Let every failed key be tried again (``clear()`` does this too)."""
        with self._lock:
            self._failed.clear()

    def clear(self) -> None:
        """Drop every graph, forget failed keys and return the pool's memory (statistics are kept;
        each dropped graph counts as an eviction by ``clear()``)."""
        with self._family_lock:
            with self._lock:
                self._failed.clear()
            super().clear()

    # -- capture ----------------------------------------------------------------------------------

    def capture_entry(
        self,
        key: GraphKey,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]] = None,
        batched: Sequence[int] = (0,),
        copied: Sequence[int] = (),
        out_batched: Any = None,
    ) -> CUDAGraphEntry:
        """Record ``fn(*args, **kwargs)`` for ``key`` and hold it (or return the entry already held).

        ``batched``, ``copied`` and ``out_batched`` say how the arguments reach the graph
        (``CaptureRequest``). Raises ``CaptureError`` when the function cannot be recorded, or its
        graph alone exceeds the memory budget.
        """
        return self._capture(key, CaptureRequest(fn, args, kwargs or {}, batched, copied, out_batched))

    def _capture(self, key: GraphKey, request: CaptureRequest) -> CUDAGraphEntry:
        """``capture_entry`` for a prepared ``CaptureRequest``."""
        with self._family_lock:
            existing = self.lookup(key)
            if existing is not None:
                return existing
            entry = self._record(key, request)
            budget = self.config.memory_budget
            if budget is not None and self.backend.pool_bytes() > budget and self.num_graphs() > 1:
                # The pool still holds the blocks of evicted graphs: graphs of a family share
                # blocks, so none can be handed back while another graph lives. Drop them all,
                # return the memory, and record this key again on its own.
                logger.info("pool holds %d bytes, above memory_budget=%d: dropping every graph to return it",
                            self.backend.pool_bytes(), budget)
                detail = f"memory_budget={budget} bytes reached by the pool with cached blocks: all graphs dropped"
                for victim in self.entries():
                    self._remove(victim.key, EvictionReason.POOL_OVER_BUDGET, detail)
                entry = self._record(key, request)
            return entry

    def _record(self, key: GraphKey, request: CaptureRequest) -> CUDAGraphEntry:
        with self._lock:
            arena = self._arenas.arena(key.signature)
        self._view_epoch.bump()  # warm-ups and the capture may write where view outputs point
        try:
            with self.instruments.capturing(request.name, key):
                entry = record(key, request, backend=self.backend, config=self.config, arena=arena)
            self.instruments.install(entry, request.name)
            self.add(entry)
        except BaseException:
            self._stats.record_capture_failure()
            self._drop_unused_arena(key.signature)
            self._release_if_empty()
            raise
        self._stats.record_capture(key.mode.name, entry.capture_time, entry.cost)
        self._stats.record_pdl(entry.recording.pdl)
        for upload in entry.recording.baked_uploads:
            self._stats.record_baked_upload(f"{upload.call} of {upload.dtype}{list(upload.shape)}{upload.where}",
                                            upload.nbytes)
            logger.debug("%s() for %s: host upload baked into the graph as a constant: %s", request.name,
                         key.descriptor, upload.describe())
        for call in entry.recording.routed_calls:
            self._stats.record_routed_call(call)
        if entry.recording.routed_calls:
            logger.debug("%s() for %s: routed to cupygraph's capture-safe implementations: %s", request.name,
                         key.descriptor, ", ".join(entry.recording.routed_calls))
        logger.debug("captured %s in %.2f ms (%d bytes)", key, 1e3 * entry.capture_time, entry.nbytes)
        return entry
