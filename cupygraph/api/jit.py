"""``cupygraph.jit``: the JAX-style front door that captures per batch shape and replays (the manager and
``StreamDispatcher`` adapt it). The hot path is the compiled replay a shortcut may publish
(``backends/fastpath/record.py``), else ``GraphedFunction._call`` with a known shortcut: find the shortcut,
``entry.run``. On a miss: classify the arguments, ask the dispatcher, then one call to the graph cache
(``find_or_capture``): once per new signature."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union, cast

from ..backends.base import ReplayMismatch
from ..backends.fastpath.compiled import COMPILED, FastFunction
from ..cache import (
    EMPTY_BATCH,
    MODE_NONE,
    CaptureRequest,
    CUDAGraphEntry,
    CUDAGraphRegistry,
    CUDAGraphStats,
    Eager,
    FirstCall,
    GraphKey,
    Namespace,
    check_arguments_fresh,
    check_pad_value,
    recording_here,
    run_eagerly,
)
from ..config.model import CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor
from ..dispatch.dispatcher import Dispatcher
from ..errors import AliasedWrite
from ..logs import debugging, function_log
from ..reasons import FallbackReason
from .arguments import ArgumentRules
from .devices import DeviceRouter
from .live import LiveFunctions
from .methods import BoundFunction, plain_function
from .options import ConfigLike, JitOptions, resolve_config, takes_options_of
from .recaptures import Recaptures
from .shortcuts import Shortcut, Shortcuts, publisher
from .warmup import Template, calls_per_size, capture_each, checked_budget, example_call, most_used_first, remember_call

_UNBOUND = object()  # ``capture_ahead``'s instance of a function that is not a bound method

_LIVE: LiveFunctions[GraphedFunction] = LiveFunctions()
live_functions = _LIVE.alive
on_creation = _LIVE.on_creation

__all__ = ["ConfigLike", "GraphedFunction", "jit", "live_functions", "on_creation", "resolve_config"]


class GraphedFunction(FastFunction):
    """A function recorded into one CUDA graph per (padded batch size, signature) and replayed.

    Workflow of a call:
      1. The batch size is the leading axis of the ``batch_argnums`` arrays (or ``descriptor_fn``).
      2. The dispatcher picks the runtime mode and the padded size; batches above the largest
         capture size run eagerly. The graph cache (``registry``) says what the key does: replay
         its graph, run eagerly (a cold key under ``capture_after``, or a key whose capture
         failed), or capture now.
      3. The call that captures a key runs the function as it is (its result, writes and draws are
         the call's), then warms it up and records it onto static buffers (``cache/first_call.py``).
      4. Arrays of exactly the captured layout are read where they are (``input_binding="auto"``:
         the graph is re-pointed); others are copied into static buffers (padding, ``pad_value`` or
         the last real row, rewritten when it changed); constants are read by address; replay.
      5. Outputs are cut back to the real batch on axis 0, those the first padded call of the key
         (run as it is) showed to carry the batch there; ``out_batched`` must agree with it.

    Contract: under ``output_mode="copy"`` (default) the caller owns the returned arrays. Under
    ``"view"`` they are views into static buffers, valid until the next call of this function.
    Constants are read by address: a new array of the same shape, dtype and strides is bound to the
    graph (``"auto"``), any other is a new key and a re-capture. Non-array arguments are static
    (keyed), so hashable; on a method, ``self`` is argument 0 (``api/methods.py``). Outputs are arrays in
    tuples, lists, dicts, namedtuples and dataclasses (None kept), or the NumPy scalar the function returns;
    other Python values in them depend only on shapes and static arguments. A jitted function called while
    another is being recorded runs inline (its kernels join that graph).

    Failures are remembered per key by the graph cache, until ``clear()``:
      * An op the graph cannot hold (a device-to-host read, a data-dependent shape, memory) fails
        the capture with a ``CaptureError`` naming the op and the line: the key runs eagerly from
        then on, counted under the reason's code (``on_capture_error="raise"``: every call raises).
      * A bug in the function raises its own exception from the run as it is, as without ``jit``;
        any other exception in warm-up, capture or output handling marks the key failed too.
      * A replay (host backend) that returns another structure, shape or Python value than the
        capture drops the graph: a stale result is never returned.
      * Errors in the call itself (an argument, ``pad_value``, ``out_batched``) are raised at once.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        options: Optional[JitOptions] = None,
        /,
        *,
        registry: Optional[CUDAGraphRegistry] = None,
        dispatcher: Optional[Dispatcher] = None,
        namespace: Optional[Namespace] = None,
        **fields: Any,
    ):
        """``options`` (or its fields as keywords, as ``jit`` takes them); a ``registry`` (and its
        ``dispatcher``) shared with other functions, whose keys ``namespace`` keeps apart."""
        fn, self._binds = plain_function(fn)
        if not callable(fn):
            raise TypeError(f"jit needs a callable, got {type(fn).__name__}")
        if options is None:
            options = JitOptions.given("GraphedFunction", fields)
        elif fields:
            raise TypeError(f"give GraphedFunction its options or their fields, not both (got {sorted(fields)})")
        functools.update_wrapper(self, fn)
        if not hasattr(self, "__name__"):  # a callable object: messages name its class
            self.__name__ = self.__qualname__ = type(fn).__name__
        self._fn = fn
        self.options = options
        self.config = resolve_config(options.config) if registry is None else registry.config
        self.registry = registry if registry is not None else CUDAGraphRegistry(self.config)
        self.backend = self.registry.backend
        self._rules = ArgumentRules(self.__name__, self.backend, options.positions(fn), namespace)
        self.batch_argnums, self.static_argnums, self.constant_argnums = (
            self._rules.batch, self._rules.static, self._rules.constant)
        self.descriptor_fn, self.out_batched = options.descriptor_fn, options.out_batched
        if dispatcher is None:
            dispatcher = Dispatcher(self.config)
            dispatcher.initialize_cudagraph_keys(self.config.mode, self.config.uniform_decode_query_len)
        self.dispatcher = dispatcher
        # What the hot path uses, looked up once: the registry never replaces them.
        self._family_lock = self.registry.family_lock
        self._family = self.backend.family
        self._stats = self.registry.recorder
        self._shortcuts = Shortcuts(self.backend.array_type, self.constant_argnums, publisher(self))
        self.miss = self._call  # the Python path of every call the compiled record does not serve
        self._generation = self.registry.generation
        self._recaptures = Recaptures(self.__name__, self._stats, self.config.on_capture_error == "raise")
        self._template: Optional[Template] = None
        self._devices = DeviceRouter(self.backend, self.batch_argnums, self, lambda device: GraphedFunction(
            fn, options, registry=self.registry.for_device(device), namespace=namespace))
        self._dev_of, self._home = self._devices.device_of, self._devices.home_device
        self._debug_log = function_log(self.__qualname__) if self.config.debug else None
        _LIVE.announce(self)

    def __get__(self, instance: Any, owner: Optional[type] = None) -> Any:
        """``obj.method``: this function with ``obj`` as argument 0 (``api/methods.py``)."""
        return self if instance is None or not self._binds else BoundFunction(self, instance)

    def __set_name__(self, owner: type, name: str) -> None:
        self._rules.method_of = owner.__qualname__  # its messages name self for argument 0

    # -- the hot path ------------------------------------------------------------------------------

    # A call is first offered to the compiled replay the shortcuts published (``FastFunction``,
    # ``backends/fastpath/record.py``); what it hands back, and every call without it, comes here.
    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if recording_here():  # called by a function this thread records: inline, as jax.jit inlines a nested jit
            return self._fn(*args, **kwargs)
        if not kwargs:
            shortcuts = self._shortcuts
            shortcut = shortcuts.find(args)
            if shortcut is not None and (self._dev_of is None or self._dev_of(args[shortcut.batched[0]]) == self._home):
                leading = shortcut.leading
                batched, whole = ((args[:leading], ()) if leading
                                  else ([args[i] for i in shortcut.batched], [args[i] for i in shortcut.whole]))
                why = None
                lock = self._family_lock
                lock.acquire()  # not ``with``: half the cost on the hot path
                try:
                    entry = shortcut.entry  # under the lock: a capture may have evicted or rebound it
                    if entry.alive and entry.constants_token is shortcut.constants_token:
                        family = self._family
                        generation = family.generation
                        try:  # free unless raised (a re-executing host replay, overlapping arguments)
                            out = entry.run(batched, shortcut.rows, whole)
                        except (ReplayMismatch, AliasedWrite) as err:
                            why = self._why_not_replayed(entry, err)
                            self._stats.record_batch_sizes(shortcut.rows)  # a call the slow path would have counted
                        else:
                            hits = entry.counts.hits  # a hit, which the statistics read from the entry
                            hits[shortcut.rows] = hits.get(shortcut.rows, 0) + 1
                            # A steady call (nothing a compiled record describes changed): make one.
                            if generation == family.generation != shortcut.compiled_at and COMPILED:
                                shortcuts.compile(shortcut, lock, generation, args)
                            return out
                finally:
                    lock.release()
                if why is not None:  # the function runs outside the lock: the family's others go on
                    return self._run_eagerly(args, kwargs, why)
        return self._call_slow(args, kwargs, not kwargs)

    # -- everything else ---------------------------------------------------------------------------

    def resolve(self, args: tuple[Any, ...], *, descriptor: Any, force: bool = False) -> Union[Shortcut, Eager]:
        """The shortcut (the entry that serves this call) for ``args`` under ``descriptor``, capturing now
        when ``force`` (``capture_after`` does not apply), or why the call runs eagerly. The caller
        holds ``registry.family_lock`` (``CUDAGraphManager.capture_graph`` does)."""
        # Not a user's call (``traffic`` off): it never runs the function as it is, so never a FirstCall.
        return cast(Union[Shortcut, Eager], self._resolve(args, {}, force=force, descriptor=descriptor)[0])

    def _resolve(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, force: bool = False,
        descriptor: Optional[Any] = None, traffic: bool = False, synthetic: bool = False,
    ) -> tuple[Union[Shortcut, Eager, FirstCall], bool]:
        """The miss path: (the shortcut to this call's entry, whether it was captured now), or (why it
        runs eagerly, False). ``traffic``: a user's call, counted in the batch sizes; one that captures, or
        the key's first padded one, runs the function as it is: a ``FirstCall`` (``cache/first_call.py``).
        ``synthetic``: ``warmup()``'s call, on its fill (``CaptureRequest.synthetic``)."""
        batched, whole, signature = self._rules.classify(args, kwargs)
        rows = self._rules.rows(args, batched)
        if traffic and rows:
            self._stats.record_batch_sizes(rows)
        if self.config.mode is CUDAGraphMode.NONE:
            return MODE_NONE, False
        if rows == 0 and batched:
            return EMPTY_BATCH, False
        desc = self._rules.descriptor(args, rows, descriptor, self.descriptor_fn)
        decision = self.dispatcher.decide(desc)
        if decision.reason is not None:
            return Eager(decision.reason, decision.detail), False
        key = GraphKey(decision.padded, decision.mode, signature)
        request = CaptureRequest(self._fn, args, kwargs, batched, whole, self.out_batched, synthetic=synthetic)
        if traffic:  # a user's call: it runs the function as it is where it captures its key
            found, captured = self.registry.find_or_capture(
                key, request, name=self.__name__, force=force, watch=self._recaptures,
                rows=rows if batched else decision.padded.num_tokens)
        else:
            found, captured = self.registry.find_or_capture(key, request, name=self.__name__, force=force,
                                                            watch=self._recaptures)
        if isinstance(found, Eager):
            return found, captured
        if isinstance(found, FirstCall):  # the call ran as it is; what serves its key's next calls:
            if not isinstance(found.verdict, Eager):  # the entry
                found.verdict = Shortcut(found.verdict, decision.mode.name, batched, whole)
            return found, captured
        return Shortcut(found, decision.mode.name, batched, whole), captured

    def _call_slow(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], cacheable: bool,
        descriptor: Optional[Any] = None,
    ) -> Any:
        if self._debug_log is not None:  # this call's decisions go to this function's debug log
            with debugging(self._debug_log):
                return self._call_resolved(args, kwargs, cacheable, descriptor)
        return self._call_resolved(args, kwargs, cacheable, descriptor)

    def _call_resolved(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], cacheable: bool, descriptor: Optional[Any],
    ) -> Any:
        if (elsewhere := self._devices.elsewhere(args)) is not None:  # arrays on another device
            return (elsewhere(*args, **kwargs) if descriptor is None
                    else elsewhere.call_with_descriptor(descriptor, *args, **kwargs))
        registry = self.registry
        debug = self.config.debug
        if debug:
            check_arguments_fresh(args, self.__name__)
        with self._family_lock:
            # Resolve and run under the family lock, so no capture elsewhere evicts the entry between.
            shortcut, _ = self._resolve(args, kwargs, descriptor=descriptor, traffic=True)
            if isinstance(shortcut, FirstCall):  # the call ran as it is: its result is the call's
                kept = shortcut.count(self._stats, self.registry, self.__name__)
                if kept is not None:
                    self._remember(args, kwargs, kept, shortcut.rows, cacheable and not debug)
                return shortcut.result
            if isinstance(shortcut, Shortcut):
                batched = [args[i] for i in shortcut.batched]
                rows = batched[0].shape[0] if batched else shortcut.entry.padded
                whole = [args[i] for i in shortcut.whole]
                if debug:
                    # An array the graph reads by address (closure, global) must still be there.
                    shortcut.entry.recording.check_references(self.__name__)
                try:
                    if debug:
                        out = registry.run_tracking_views(shortcut.entry, batched, rows, whole, name=self.__name__)
                    else:
                        out = shortcut.entry.run(batched, rows, whole)
                except (ReplayMismatch, AliasedWrite) as err:
                    why = self._why_not_replayed(shortcut.entry, err)  # run eagerly below, outside the lock
                else:
                    self._stats.record_hit(shortcut.mode_name)
                    self._remember(args, kwargs, shortcut, rows, cacheable and not debug)  # debug checks every call
                    return out
            else:
                why = shortcut
        return self._run_eagerly(args, kwargs, why)

    def _remember(self, args: tuple[Any, ...], kwargs: dict[str, Any], shortcut: Shortcut, rows: int,
                  cacheable: bool) -> None:
        """Keep the shortcut for the fast path (dropping those of gone entries) and the call for ``warmup()``."""
        if self._generation != self.registry.generation:
            self._shortcuts.clear()
            self._generation = self.registry.generation
        if cacheable and shortcut.batched:
            shortcut.rows = rows
            self._shortcuts.remember(args, shortcut)
        self._template = remember_call(args, kwargs, shortcut.batched + shortcut.whole)

    def _run_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any], why: Eager) -> Any:
        with self.registry.instruments.eager(self.__name__, why.reason.value):
            return run_eagerly(self._fn, args, kwargs, why, name=self.__name__, stats=self._stats,
                               raises=self.registry.raises)

    def _why_not_replayed(self, entry: CUDAGraphEntry, err: Exception) -> Eager:
        """Why a call that found ``entry`` runs eagerly (under the family lock; a mismatch drops it)."""
        if isinstance(err, ReplayMismatch):
            return self.registry.replay_failed(entry, err, name=self.__name__)
        return Eager(FallbackReason.ALIASED_WRITE, str(err))

    # -- public helpers ----------------------------------------------------------------------------

    def warmup(self, *example_args: Any, sizes: Optional[Sequence[int]] = None, progress: bool = True,
               budget_s: Optional[float] = None) -> int:
        """Capture ahead of time, the most used sizes first; return how many graphs were captured.

        The arrays in ``example_args`` (or, when none are given, the last call's) give the
        signature; their batched arguments are resized to each size in ``sizes`` (default: every
        capture size), filled with ``pad_value`` (under ``pad_mode="edge"``: the examples' rows, the last
        one repeated). A size below 1 or above the largest capture size is an error naming it. Largest
        first (the smaller graphs reuse its pool blocks); under ``budget_s`` the most used first (by the
        calls of ``stats().batch_sizes`` each size's graph serves), and no capture starts once that many
        seconds have passed (0: none): the sizes left are captured as without ``warmup`` (by their first call,
        their ``capture_after``-th under that setting).
        """
        return self.capture_ahead(_UNBOUND, example_args, sizes, progress, budget_s)

    def capture_ahead(self, instance: Any, example_args: tuple[Any, ...], sizes: Optional[Sequence[int]],
                      progress: bool, budget_s: Optional[float] = None) -> int:
        """``warmup``; for a method's ``instance`` (``_UNBOUND``: none), argument 0 of every call."""
        budget = checked_budget(self.__name__, budget_s)
        if instance is not _UNBOUND:
            example_args = (instance, *example_args) if example_args else ()
        if (elsewhere := self._devices.elsewhere(example_args)) is not None:
            return elsewhere.warmup(*example_args, sizes=sizes, progress=progress, budget_s=budget)
        template_args, template_kwargs = example_call(self, example_args, self._template, self.batch_argnums)
        if instance is not _UNBOUND and not example_args:  # the last call's arguments, this instance's
            template_args = (instance, *template_args[1:])
        chosen = most_used_first(self.config.cudagraph_capture_sizes if sizes is None
                                 else self._rules.warmup_sizes(sizes, self.config.largest_capture_size),
                                 None if budget is None else self.stats().batch_sizes,
                                 self.config.get_padded_batch_size)
        check_pad_value(template_args, self.batch_argnums, self.config.pad_value, self.__name__)
        calls = calls_per_size(template_args, self.batch_argnums, chosen, self.backend.xp, self.config.pad_value,
                               self.config.pad_mode)
        return capture_each(self.__name__, calls, chosen,
                            lambda args: self._resolve(args, template_kwargs, force=True, synthetic=True),
                            raises=self.registry.raises, progress=progress, budget_s=budget)

    def call_with_descriptor(self, descriptor: BatchDescriptor, *args: Any, **kwargs: Any) -> Any:
        """Call with an explicit batch descriptor (request count, uniform decode, sequence length);
        ``descriptor.num_tokens`` must be at least the batched arguments' rows."""
        return self._call_slow(args, kwargs, False, descriptor)

    def stats(self) -> CUDAGraphStats:
        """This function's statistics (its registry's, the fast path's counts folded in)."""
        return self.registry.stats()

    def devices(self) -> dict[int, GraphedFunction]:
        """The function's graph family on each device it was called on, by device id."""
        return self._devices.families()

    def describe(self) -> str:
        """A table of the graphs held per mode and size, hit rate and fallbacks by reason."""
        from ..diagnostics.inspect import describe
        return describe(self)

    def to_dot(self, size: Optional[int] = None) -> str:
        """The captured graph for batch ``size`` (default: the largest held) in Graphviz DOT."""
        from ..diagnostics.inspect import to_dot
        return to_dot(self, size)

    def clear(self) -> None:
        """Drop every graph (the memory goes back) and forget failed keys; stats are kept."""
        self._devices.clear_others()
        with self._family_lock:
            self.registry.clear()
            self._shortcuts.clear(constants=True)
            self._recaptures.clear()
            self._template = None

    def __repr__(self) -> str:
        return f"<cupygraph.jit {self.__name__} mode={self.config.mode.name} graphs={self.registry.num_graphs()}>"


@takes_options_of(JitOptions, GraphedFunction)
def jit(fn: Optional[Callable[..., Any]] = None, /, **options: Any) -> Any:
    """Record ``fn`` into CUDA graphs per batch shape; use as ``@jit`` or ``@jit(config=...)``.

    The keyword options are ``JitOptions``'s fields: ``config``, ``batch_argnums``,
    ``static_argnums``, ``constant_argnums``, ``descriptor_fn``, ``out_batched``. See
    ``GraphedFunction`` for what is copied, what is owned, what stays valid until when, and what
    happens to a key that cannot be graphed.

    Like ``jax.jit``'s tracing, the call that captures a key runs ``fn``'s Python body 2 +
    ``num_warmups`` times (as it is, warm-ups, capture run; 2 where it wrote into an array it reads
    by address), a replay once on the host backend and never on the GPU: side effects repeat.
    README.md, "What a call runs", has the table, checked by tests.
    """
    chosen = JitOptions.given("jit", options)
    if fn is None:
        return lambda f: GraphedFunction(f, chosen)
    return GraphedFunction(fn, chosen)
