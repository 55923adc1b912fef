"""``cupygraph.jit``: the JAX-style front door that captures per batch shape and replays."""

from __future__ import annotations

import functools
import logging
import operator
import os
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar, Union, overload

import numpy as np

from .config import CUDAGraphConfig, CUDAGraphMode, default_config, graphs_disabled_by_env
from .descriptor import BatchDescriptor
from .dispatcher import CudagraphDispatcher
from .errors import CaptureError, InputMismatchError, StaleOutputError
from .explain import configure_logging, explain_new_key
from .freshness import issue, stale_reason
from .registry import CUDAGraphEntry, CUDAGraphRegistry, GraphKey
from .stats import CUDAGraphStats

logger = logging.getLogger("cupygraph")

F = TypeVar("F", bound=Callable[..., Any])
ConfigLike = Union[CUDAGraphConfig, dict[str, Any], str, "os.PathLike[str]", None]


def resolve_config(config: ConfigLike) -> CUDAGraphConfig:
    """A config object, a mapping of fields, or a path to a config file; ``CUPYGRAPH_DISABLE`` wins."""
    if config is None:
        resolved = default_config()
    elif isinstance(config, CUDAGraphConfig):
        resolved = config
    elif isinstance(config, dict):
        resolved = CUDAGraphConfig.from_dict(config)
    elif isinstance(config, (str, os.PathLike)):
        resolved = CUDAGraphConfig.from_file(config)
    else:
        raise TypeError(
            f"config must be a CUDAGraphConfig, a dict of fields or a config file path, got {type(config).__name__}"
        )
    if graphs_disabled_by_env() and resolved.mode is not CUDAGraphMode.NONE:
        resolved = CUDAGraphConfig(**{**resolved.to_dict(), "mode": "NONE"})
    return resolved


def _argnums(value: Union[int, Sequence[int]], name: str) -> tuple[int, ...]:
    items = (value,) if isinstance(value, int) else tuple(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise TypeError(f"{name} must hold non-negative argument positions, got {item!r}")
    return items


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    kind = f"{type(value).__module__}.{type(value).__name__}"
    return f"{dtype}{list(shape)} of type {kind}" if shape is not None and dtype is not None else kind


_FAST_PLANS_LIMIT = 4096

_LIVE: weakref.WeakSet[GraphedFunction] = weakref.WeakSet()


_CREATION_HOOKS: list[Callable[[GraphedFunction], None]] = []


def live_functions() -> list[GraphedFunction]:
    """Every jitted function alive in this process (for inspection, the pytest plugin and the CLI)."""
    return list(_LIVE)


def on_creation(hook: Callable[[GraphedFunction], None]) -> Callable[[], None]:
    """Call ``hook(fn)`` for every jitted function created from now on; returns an unsubscribe."""
    _CREATION_HOOKS.append(hook)
    return lambda: _CREATION_HOOKS.remove(hook)


class _ArraySpec:
    """Shape and dtype of an argument seen earlier (``warmup`` makes a placeholder from it)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.shape, self.dtype = tuple(shape), dtype


class _Plan:
    """How a call signature maps onto an entry: which arguments are copied in and how."""

    __slots__ = ("batched", "entry", "mode_name", "whole")

    def __init__(self, entry: CUDAGraphEntry, mode_name: str, batched: tuple[int, ...], whole: tuple[int, ...]):
        self.entry, self.mode_name, self.batched, self.whole = entry, mode_name, batched, whole


class GraphedFunction:
    """A function recorded into one CUDA graph per (padded batch size, signature) and replayed.

    Workflow of a call:
      1. The batch size is the leading axis of the ``batch_argnums`` arrays (or ``descriptor_fn``).
      2. The dispatcher picks the runtime mode and the padded size; batches above the largest
         capture size, cold keys (``capture_after``) and keys whose capture failed run eagerly.
      3. On the first sight of a key the function is warmed up and captured onto static buffers.
      4. Each batched array is copied into its static buffer (one async memcpy when contiguous;
         padding rewritten only when the real size changed), other arrays are copied whole,
         ``constant_argnums`` arrays are used by address; the graph replays on the caller's stream.
      5. Outputs whose leading axis is the padded size are cut back to the real batch (declare
         ``out_batched`` — a bool or the outputs' structure of bools — when an unbatched output
         happens to have that length).

    Contract: under ``output_mode="copy"`` (default) the caller owns the returned arrays. Under
    ``"view"`` they are views into static buffers, valid until the next call of this function.
    Constant arguments are captured by address: a different array (address, shape, dtype or
    strides) is a new key and a re-capture. Non-array arguments are static: part of the key, so
    hashable.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        config: ConfigLike = None,
        batch_argnums: Union[int, Sequence[int]] = (0,),
        static_argnums: Union[int, Sequence[int]] = (),
        constant_argnums: Union[int, Sequence[int]] = (),
        descriptor_fn: Optional[Callable[..., Any]] = None,
        out_batched: Any = None,
        registry: Optional[CUDAGraphRegistry] = None,
        dispatcher: Optional[CudagraphDispatcher] = None,
        namespace: tuple[Any, ...] = (),
    ):
        if not callable(fn):
            raise TypeError(f"jit needs a callable, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        if not hasattr(self, "__name__"):  # a callable object: messages name its class
            self.__name__ = self.__qualname__ = type(fn).__name__
        self._fn = fn
        self.config = resolve_config(config) if registry is None else registry.config
        self.batch_argnums = _argnums(batch_argnums, "batch_argnums")
        self.static_argnums = _argnums(static_argnums, "static_argnums")
        self.constant_argnums = _argnums(constant_argnums, "constant_argnums")
        for a_name, a in (("static_argnums", self.static_argnums), ("constant_argnums", self.constant_argnums)):
            clash = set(a) & set(self.batch_argnums)
            if clash:
                raise ValueError(f"argument {sorted(clash)[0]} is in both batch_argnums and {a_name}")
        if not self.batch_argnums and descriptor_fn is None:
            raise ValueError("give batch_argnums (arrays whose leading axis is the batch) or a descriptor_fn")
        self.descriptor_fn = descriptor_fn
        self.out_batched = out_batched
        self.registry = registry if registry is not None else CUDAGraphRegistry(self.config)
        self.backend = self.registry.backend
        if dispatcher is None:
            dispatcher = CudagraphDispatcher(self.config, registry=self.registry)
            dispatcher.initialize_cudagraph_keys(self.config.mode, self.config.uniform_decode_query_len)
        self.dispatcher = dispatcher
        self._namespace = namespace
        self._array_type = self.backend.array_type
        self._const = frozenset(self.constant_argnums)
        self._const_positions = tuple(sorted(self._const))
        self._constants_now: Optional[tuple[Any, ...]] = None
        self._fast: dict[tuple[Any, ...], _Plan] = {}
        self._generation = self.registry.generation
        self._failed: dict[GraphKey, str] = {}
        self._constants_seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._template: Optional[tuple[tuple[Any, ...], dict[str, Any]]] = None
        if self.config.debug:
            configure_logging("debug")
        _LIVE.add(self)
        for hook in list(_CREATION_HOOKS):
            hook(self)

    # -- the hot path ------------------------------------------------------------------------------

    def _plan_key(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """What a cached plan is found by: shapes and dtypes of the arrays, typed static values.

        Constant arguments are not part of it: a plan is only looked up while the constants are the
        very objects of the current constant set (``_fast_key``), which identity checks cheaply.
        """
        array_type = self._array_type
        if len(args) == 1 and not self._const:
            (a,) = args  # the common case, kept cheap: one batched array
            return ((a.shape, a.dtype),) if isinstance(a, array_type) else ((type(a), a),)
        # Static values carry their type: 1, 1.0 and True are equal but trace different graphs.
        if not self._const:
            return tuple((a.shape, a.dtype) if isinstance(a, array_type) else (type(a), a) for a in args)
        const = self._const
        return (len(args), *(
            (a.shape, a.dtype) if isinstance(a, array_type) else (type(a), a)
            for i, a in enumerate(args) if i not in const
        ))

    def _fast_key(self, args: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
        """The plan key, or None when the constants are not the current constant set."""
        positions = self._const_positions
        if positions:
            current = self._constants_now
            # Identity, not equality: the slow path keys constants by address, shape, strides and
            # dtype; the same objects cannot have changed any of those.
            if (current is None or len(args) <= positions[-1]
                    or not all(map(operator.is_, map(args.__getitem__, positions), current))):
                return None
        return self._plan_key(args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            try:
                fast_key = self._fast_key(args)
                plan = None if fast_key is None else self._fast.get(fast_key)
            except TypeError:  # an unhashable argument: the slow path explains what is wrong
                plan = None
            if plan is not None:
                batched = [args[i] for i in plan.batched]
                registry = self.registry
                with registry.exec_lock:
                    # Checked under the lock: another thread's capture may have evicted the entry.
                    if plan.entry.alive:
                        out = plan.entry.run(batched, batched[0].shape[0], [args[i] for i in plan.whole])
                        registry.stats().record_hit(plan.mode_name)
                        return out
        return self._call_slow(args, kwargs, not kwargs)

    # -- everything else ---------------------------------------------------------------------------

    def _classify(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]]:
        """Check every argument; return (batched, copied-whole, signature)."""
        backend = self.backend
        for i in self.batch_argnums + self.constant_argnums:
            if i >= len(args):
                raise TypeError(
                    f"{self.__name__}() got {len(args)} positional arguments but argument {i} is declared "
                    f"in batch_argnums/constant_argnums"
                )
        whole: list[int] = []
        signature: list[tuple[Any, ...]] = []
        for i, arg in enumerate(args):
            if backend.is_array(arg):
                if i in self.static_argnums:
                    raise InputMismatchError(
                        f"argument {i} of {self.__name__}() is an array but is in static_argnums; static "
                        f"arguments are hashable Python values (use constant_argnums for weights)"
                    )
                if i in self._const:
                    signature.append(("const", backend.address(arg), arg.shape, arg.dtype, arg.strides))
                elif i in self.batch_argnums:
                    if arg.ndim == 0:
                        raise InputMismatchError(
                            f"argument {i} of {self.__name__}() is a 0-d array but is in batch_argnums; "
                            f"batched arguments need a leading batch axis"
                        )
                    signature.append(("batch", arg.shape[1:], arg.dtype))
                else:
                    whole.append(i)
                    signature.append(("array", arg.shape, arg.dtype))
                device = backend.device_of(arg)
                if device != getattr(backend, "device_id", -1):
                    raise InputMismatchError(
                        f"argument {i} of {self.__name__}() is on device {device} but this function's graphs "
                        f"live on device {getattr(backend, 'device_id', -1)}; move it or jit it per device"
                    )
            elif isinstance(arg, np.generic):
                signature.append(("static", type(arg), arg))
            elif hasattr(arg, "__array_interface__") or hasattr(arg, "__cuda_array_interface__"):
                raise InputMismatchError(
                    f"argument {i} of {self.__name__}() is {_describe(arg)}, but this function's graphs use "
                    f"{backend.name} arrays ({self._array_type.__module__}.{self._array_type.__name__}); convert "
                    f"it, or choose backend='host' for NumPy"
                )
            elif i in self.batch_argnums:
                raise InputMismatchError(
                    f"argument {i} of {self.__name__}() is in batch_argnums but is {_describe(arg)}, not an array"
                )
            else:
                try:
                    hash(arg)
                except TypeError:
                    raise InputMismatchError(
                        f"argument {i} of {self.__name__}() is an unhashable {type(arg).__name__}; non-array "
                        f"arguments are static (part of the graph key) and must be hashable"
                    ) from None
                signature.append(("static", type(arg), arg))
        for name, value in kwargs.items():
            try:
                hash(value)
            except TypeError:
                raise InputMismatchError(
                    f"keyword argument {name!r} of {self.__name__}() is an unhashable {type(value).__name__}; "
                    f"keyword arguments are static (part of the graph key); pass arrays positionally"
                ) from None
        if kwargs:
            signature.append(("kwargs", tuple(sorted((k, type(v), v) for k, v in kwargs.items()))))
        return self.batch_argnums, tuple(whole), self._namespace + tuple(signature)

    def _rows(self, args: tuple[Any, ...], batched: tuple[int, ...]) -> int:
        rows = None
        for i in batched:
            n = args[i].shape[0]
            if rows is None:
                rows = n
            elif n != rows:
                raise InputMismatchError(
                    f"batched arguments of {self.__name__}() disagree on the batch size: argument "
                    f"{batched[0]} has {rows} rows, argument {i} has {n}"
                )
        return 0 if rows is None else rows

    def _descriptor(self, args: tuple[Any, ...], rows: int) -> BatchDescriptor:
        if self.descriptor_fn is None:
            return BatchDescriptor(rows)
        desc = self.descriptor_fn(*args)
        if isinstance(desc, int):
            desc = BatchDescriptor(desc)
        if not isinstance(desc, BatchDescriptor):
            raise TypeError(f"descriptor_fn must return a BatchDescriptor or an int, got {type(desc).__name__}")
        if self.batch_argnums and desc.num_tokens != rows:
            raise InputMismatchError(
                f"descriptor_fn says num_tokens={desc.num_tokens} but the batched arguments have {rows} rows"
            )
        return desc

    def _eager(self, args: tuple[Any, ...], kwargs: dict[str, Any], reason: str, mode: str = "NONE") -> Any:
        self.registry.stats().record_fallback(reason, mode)
        logger.debug("%s runs eagerly: %s", self.__name__, reason)
        return self._fn(*args, **kwargs)

    def _resolve(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, force: bool = False,
        descriptor: Optional[BatchDescriptor] = None,
    ) -> tuple[Optional[_Plan], str, bool]:
        """Find or capture the entry for this call; (None, reason, False) when it must run eagerly."""
        batched, whole, signature = self._classify(args, kwargs)
        rows = self._rows(args, batched)
        if self.config.mode is CUDAGraphMode.NONE:
            return None, "mode NONE (graphs disabled)", False
        if rows == 0 and batched:
            return None, "empty batch (0 rows)", False
        desc = descriptor if descriptor is not None else self._descriptor(args, rows)
        mode, padded = self.dispatcher.dispatch(desc)
        if mode is CUDAGraphMode.NONE or padded is None:
            largest = self.config.largest_capture_size
            if largest is not None and desc.num_tokens > largest:
                return None, f"batch of {desc.num_tokens} is above the largest capture size {largest}", False
            return None, f"no graph mode for {desc} under mode {self.config.mode.name}", False
        key = GraphKey(padded, mode, signature)
        failed = self._failed.get(key)
        if failed is not None:
            return None, failed, False
        entry = self.registry.lookup(key)
        captured = False
        if entry is None:
            seen = self.registry.note_seen(key)
            if not force and seen < self.config.capture_after:
                return None, f"cold key: seen {seen} of capture_after={self.config.capture_after} times", False
            self._explain_capture(key)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s() captures %s: %s", self.__name__, padded,
                             explain_new_key(key, [e.key for e in self.registry.entries()]))
            try:
                entry = self.registry.capture_entry(
                    key, self._fn, args, kwargs, batched=batched, copied=whole, out_batched=self.out_batched
                )
            except CaptureError as err:
                if self.config.on_capture_error == "raise":
                    raise CaptureError(f"cannot capture {self.__name__}() for {padded}: {err}") from err
                reason = f"capture failed: {err}"
                self._failed[key] = reason
                # The text, not the exception: a handler that keeps records (pytest, MemoryHandler)
                # would keep its traceback's frames and the static buffers they reference.
                logger.warning("cupygraph: %s() for %s runs eagerly from now on: %s", self.__name__, padded, str(err))
                return None, reason, False
            captured = True
            self.registry.note_seen(key, -1)  # this sighting is counted as the graph's first replay
        return _Plan(entry, mode.name, batched, whole), "", captured

    def _explain_capture(self, key: GraphKey) -> None:
        """Count re-captures caused by a constant argument that moved, and say which one."""
        consts = tuple(part for part in key.signature if isinstance(part, tuple) and part and part[0] == "const")
        if not consts:
            return
        rest = (key.descriptor, key.mode, tuple(p for p in key.signature if p not in consts))
        previous = self._constants_seen.get(rest)
        if previous is not None and previous != consts:
            if self.config.on_capture_error == "raise":
                raise InputMismatchError(
                    f"a constant argument of {self.__name__}() changed (address, shape, dtype or strides) "
                    f"since capture; was {previous}, now {consts}"
                )
            self.registry.stats().record_recapture("a constant argument changed address, shape, dtype or strides")
            logger.info("%s() re-captures %s: a constant argument changed", self.__name__, key.descriptor)
        self._constants_seen[rest] = consts

    def _call_slow(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], cacheable: bool,
        descriptor: Optional[BatchDescriptor] = None,
    ) -> Any:
        registry = self.registry
        debug = self.config.debug
        if debug:
            self._check_arguments_fresh(args)
        with registry.exec_lock:
            # Resolve and run under the family lock, so no capture elsewhere evicts the entry between.
            plan, reason, captured = self._resolve(args, kwargs, descriptor=descriptor)
            if plan is not None:
                if self._generation != registry.generation:
                    self._fast.clear()
                    self._generation = registry.generation
                batched = [args[i] for i in plan.batched]
                rows = batched[0].shape[0] if batched else plan.entry.key.descriptor.num_tokens
                if debug:
                    registry.view_epoch.bump()
                    # An array the graph reads by address (closure, global) must still be there.
                    plan.entry.cudagraph.check_references(self.__name__)
                out = plan.entry.run(batched, rows, [args[i] for i in plan.whole])
                if captured:
                    registry.stats().record_first_replay(plan.mode_name)
                else:
                    registry.stats().record_hit(plan.mode_name)
                # Debug mode checks every call, so it never takes the fast path.
                if cacheable and batched and not debug:
                    self._cache_plan(args, plan)
                self._template = (self._remember(args, plan), kwargs)
                if debug and self.config.output_mode == "view":
                    out = issue(out, registry.view_epoch, self.backend.is_array, self.__name__)
                return out
        return self._eager(args, kwargs, reason)

    def _check_arguments_fresh(self, args: tuple[Any, ...]) -> None:
        """Debug mode: an argument that is a view output rewritten since it was returned is an error."""
        for i, arg in enumerate(args):
            reason = stale_reason(arg)
            if reason is not None:
                raise StaleOutputError(f"argument {i} of {self.__name__}(): {reason}")

    def _cache_plan(self, args: tuple[Any, ...], plan: _Plan) -> None:
        """Keep ``plan`` for the fast path under this call's plan key and constant set."""
        positions = self._const_positions
        if positions:
            constants = tuple(args[i] for i in positions)
            current = self._constants_now
            if current is None or not all(map(operator.is_, constants, current)):
                # A new constant set (new weights): plans of the old set no longer apply. The set is
                # held strongly so its identity stays meaningful; it is replaced by the next one.
                self._fast.clear()
                self._constants_now = constants
        if len(self._fast) >= _FAST_PLANS_LIMIT:
            self._fast.clear()  # bounded, whatever callers pass
        try:
            self._fast[self._plan_key(args)] = plan
        except TypeError:
            pass  # an unhashable static value: this call stays on the slow path

    def _remember(self, args: tuple[Any, ...], plan: _Plan) -> tuple[Any, ...]:
        """The call's arguments for a later ``warmup()``, without holding the caller's data:
        copied arrays become (shape, dtype) specs; constants (captured by address) are kept."""
        copied = set(plan.batched) | set(plan.whole)
        return tuple(_ArraySpec(a.shape, a.dtype) if i in copied else a for i, a in enumerate(args))

    # -- public helpers ----------------------------------------------------------------------------

    def warmup(self, *example_args: Any, sizes: Optional[Sequence[int]] = None, progress: bool = True) -> int:
        """Capture ahead of time, largest size first; return how many graphs were captured.

        The arrays in ``example_args`` (or, when none are given, the last call's) give the
        signature; their batched arguments are resized to each capture size.
        """
        template_kwargs: dict[str, Any]
        if example_args:
            template_args, template_kwargs = example_args, {}
        elif self._template is not None:
            template_args, template_kwargs = self._template
        else:
            raise ValueError(f"{self.__name__}.warmup() needs example arguments before the first call")
        xp = self.backend.xp
        chosen = sorted(set(sizes if sizes is not None else self.config.cudagraph_capture_sizes), reverse=True)
        bar = _progress(len(chosen), f"capturing {self.__name__}", progress)
        count = 0
        try:
            for size in chosen:
                args = [xp.full(a.shape, self.config.pad_value, dtype=a.dtype) if isinstance(a, _ArraySpec) else a
                        for a in template_args]
                for i in self.batch_argnums:
                    like = template_args[i]
                    args[i] = xp.full((size, *like.shape[1:]), self.config.pad_value, dtype=like.dtype)
                plan, reason, captured = self._resolve(tuple(args), template_kwargs, force=True)
                count += captured
                if plan is None:
                    logger.info("warmup of %s() size %d: %s", self.__name__, size, reason)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return count

    def call_with_descriptor(self, descriptor: BatchDescriptor, *args: Any, **kwargs: Any) -> Any:
        """Call with an explicit batch descriptor (request count, uniform decode, sequence length)."""
        return self._call_slow(args, kwargs, False, descriptor)

    def stats(self) -> CUDAGraphStats:
        return self.registry.stats()

    def describe(self) -> str:
        """A table of the graphs held per mode and size, hit rate and fallbacks by reason."""
        from .inspect import describe

        return describe(self)

    def to_dot(self, size: Optional[int] = None) -> str:
        """The captured graph for batch ``size`` (default: the largest held) in Graphviz DOT."""
        from .inspect import to_dot

        return to_dot(self, size)

    def clear(self) -> None:
        """Drop every graph (the memory goes back) and forget failed keys; stats are kept."""
        with self.registry.exec_lock:
            self.registry.clear()
            self._fast.clear()
            self._constants_now = None
            self._failed.clear()
            self._constants_seen.clear()
            self._template = None

    def __repr__(self) -> str:
        return f"<cupygraph.jit {self.__name__} mode={self.config.mode.name} graphs={self.registry.num_graphs()}>"


def _progress(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on a terminal, otherwise nothing (logs and CI stay clean)."""
    if not enabled or total <= 1 or not sys.stderr.isatty() or os.environ.get("CUPYGRAPH_PROGRESS") == "0":
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="graph", leave=False)


@overload
def jit(
    fn: F, /, *, config: ConfigLike = None, batch_argnums: Union[int, Sequence[int]] = (0,),
    static_argnums: Union[int, Sequence[int]] = (), constant_argnums: Union[int, Sequence[int]] = (),
    descriptor_fn: Optional[Callable[..., Any]] = None, out_batched: Any = None,
) -> GraphedFunction: ...


@overload
def jit(
    fn: None = None, /, *, config: ConfigLike = None, batch_argnums: Union[int, Sequence[int]] = (0,),
    static_argnums: Union[int, Sequence[int]] = (), constant_argnums: Union[int, Sequence[int]] = (),
    descriptor_fn: Optional[Callable[..., Any]] = None, out_batched: Any = None,
) -> Callable[[F], GraphedFunction]: ...


def jit(
    fn: Optional[Callable[..., Any]] = None,
    /,
    *,
    config: ConfigLike = None,
    batch_argnums: Union[int, Sequence[int]] = (0,),
    static_argnums: Union[int, Sequence[int]] = (),
    constant_argnums: Union[int, Sequence[int]] = (),
    descriptor_fn: Optional[Callable[..., Any]] = None,
    out_batched: Any = None,
) -> Any:
    """Record ``fn`` into CUDA graphs per batch shape; use as ``@jit`` or ``@jit(config=...)``.

    See ``GraphedFunction`` for what is copied, what is owned and what stays valid until when.
    """
    options = dict(
        config=config, batch_argnums=batch_argnums, static_argnums=static_argnums,
        constant_argnums=constant_argnums, descriptor_fn=descriptor_fn, out_batched=out_batched,
    )
    if fn is None:
        return lambda f: GraphedFunction(f, **options)
    return GraphedFunction(fn, **options)
