"""Lockstep graphs: every rank captures the same keys in the same order, and replays them together.

NCCL makes capturing a collective itself collective: each rank must capture, and later launch,
the graph made from the same capture. ``LockstepFunction`` keeps the ranks' graph caches equal:

1. Before dispatch the ranks agree on the batch (one host collective of three int64s per call):
   the largest rows over ranks, and a code of the arguments' trailing shapes, dtypes and static
   values, which must be the same everywhere (a ``DistributedError`` on every rank otherwise).
   A rank with fewer rows pads its batched arguments to the agreed rows with ``pad_value`` and
   gets its own rows back (outputs cut on their leading axis, writes into its arguments copied
   back), so every rank asks for the same key, graphed or eager.
   ``equal_batches=True`` skips the agreement when the caller guarantees equal batches.
2. Every rank's cache starts equal and sees the same keys in the same order, so ``capture_after``
   counts and failed keys agree; eviction (``max_cached_graphs``, ``memory_budget``), which could
   differ between ranks (pool sizes differ), is refused by the config check.
3. After each capture the ranks agree on success (``LockstepRegistry``): when any rank failed,
   every rank drops its graph and marks the key failed, so they fall back to eager together.
   Before it they agree on its warm-ups: a rank whose call wrote into an array the function reads
   by address skips them (``cache/first_call.py``), and then every rank does.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from ..api.jit import GraphedFunction
from ..api.options import JitOptions, resolve_config
from ..backends.base import Backend
from ..cache import CaptureRequest, CUDAGraphEntry, CUDAGraphRegistry, CUDAGraphStats, GraphKey, same_bytes
from ..config.model import CUDAGraphConfig
from ..errors import CaptureError, ConfigError
from ..pytree import flatten, unflatten
from ..reasons import EvictionReason, FallbackReason
from .comm import Communicator, DistributedError

__all__ = ["LockstepFunction", "LockstepRegistry", "jit", "lockstep_config"]

_PLAIN_STATICS = (int, float, str, bool, bytes, type(None))


def lockstep_config(config: CUDAGraphConfig, comm: Communicator) -> CUDAGraphConfig:
    """``config`` on the communicator's backend; an error naming the eviction fields when set."""
    for field in ("max_cached_graphs", "memory_budget"):
        if getattr(config, field) is not None:
            raise ConfigError(
                f"{field}={getattr(config, field)!r}: eviction is off under cupygraph.distributed (each rank "
                f"evicting on its own would make one rank re-capture alone, and NCCL captures are collective); "
                f"set {field}=None and bound memory with the capture sizes instead"
            )
    if config.num_warmups < 1:
        raise ConfigError(
            "num_warmups=0: under cupygraph.distributed every capture needs a warm-up run first, because NCCL "
            "connects ranks lazily on a communicator's first operations, which a stream capture cannot hold; "
            "set num_warmups to 1 or more"
        )
    if config.backend not in ("auto", comm.backend_name):
        raise ConfigError(f"backend={config.backend!r} but the communicator carries {comm.backend_name} arrays; "
                          f"use backend={comm.backend_name!r} or 'auto'")
    return config.model_copy(update={"backend": comm.backend_name})


class LockstepRegistry(CUDAGraphRegistry):
    """The graph cache of one rank, whose captures succeed on every rank or on none.

    Contract: every capture ends with one host collective (``comm.agree_all``) on every rank,
    also when this rank's capture raised; a graph whose capture failed on another rank is
    dropped here and its key fails with ``capture_failed_on_another_rank``.
    """

    def __init__(self, config: CUDAGraphConfig, comm: Communicator, backend: Optional[Backend] = None):
        super().__init__(config, backend)
        self.comm = comm

    def for_device(self, device: int) -> CUDAGraphRegistry:
        """Refused: a rank's graphs live on its one GPU (NCCL under capture with several GPUs per
        process can deadlock, and another device's family would capture without the other ranks)."""
        raise DistributedError(
            f"rank {self.comm.rank} uses device {self.comm.device}, but was called with arrays on device {device}; "
            "one GPU per process under cupygraph.distributed: move the arrays to this rank's device"
        )

    def _capture(self, key: GraphKey, request: CaptureRequest) -> CUDAGraphEntry:
        # A call's own run may show, on some ranks only, writes that make its capture skip the warm-ups
        # (``cache/first_call.py``): every rank runs the same collectives, so all skip them when one does.
        if not self.comm.agree_all(request.warmups != 0):
            request = dataclasses.replace(request, warmups=0)
        try:
            entry = super()._capture(key, request)
        except BaseException:
            self.comm.agree_all(False)  # the others drop their graph; this rank's error goes on
            raise
        if not self.comm.agree_all(True):
            detail = (f"{FallbackReason.PEER_CAPTURE_FAILED.text}: {key.descriptor} captured here (rank "
                      f"{self.comm.rank}) but not on every rank")
            self.evict(key, EvictionReason.PEER_CAPTURE_FAILED, detail)
            err = CaptureError(detail)
            err.reason = FallbackReason.PEER_CAPTURE_FAILED  # type: ignore[attr-defined]
            raise err
        return entry


def signature_code(
    args: Sequence[Any], kwargs: dict[str, Any], batch: Sequence[int], is_array: Callable[[Any], bool]
) -> int:
    """A code of what must match on every rank: arrays' shapes (batched ones without the batch
    axis) and dtypes, plain static values, other values' types. The same on every process (no
    ``hash()``, which Python randomises per process)."""
    parts: list[str] = []
    for i, arg in enumerate(args):
        if is_array(arg):
            shape = tuple(arg.shape[1:]) if i in batch else tuple(arg.shape)
            parts.append(f"a{shape}{np.dtype(arg.dtype).str}")
        elif isinstance(arg, _PLAIN_STATICS):
            parts.append(f"{type(arg).__name__}:{arg!r}")
        else:
            parts.append(type(arg).__qualname__)
    for name in sorted(kwargs):
        value = kwargs[name]
        parts.append(f"{name}={value!r}" if isinstance(value, _PLAIN_STATICS) else f"{name}:{type(value).__qualname__}")
    return zlib.crc32("|".join(parts).encode())


class LockstepFunction:
    """A jitted function called by every rank of a job in the same order (see the module docstring).

    ``graphed`` is the ``GraphedFunction`` underneath, on a ``LockstepRegistry``. Every method is
    collective: each rank calls it with arguments of the same shapes (but the batch), dtypes and
    static values. An exception raised on one rank only outside a capture (a bug in the function
    that depends on the rank) leaves the others waiting in their next collective, as in any MPI
    program; a failing capture does not.
    """

    def __init__(self, fn: Callable[..., Any], comm: Communicator, options: JitOptions, *, equal_batches: bool = False):
        if options.descriptor_fn is not None:
            raise TypeError("cupygraph.distributed.jit does not take descriptor_fn: the ranks agree on the rows of "
                            "batch_argnums; give batch_argnums instead")
        config = lockstep_config(resolve_config(options.config), comm)
        backend: Optional[Backend] = None
        if comm.backend_name == "cupy":
            from ..backends.cupy.backend import CupyBackend

            backend = CupyBackend(comm.device)
        self.comm = comm
        self.equal_batches = equal_batches
        self.registry = LockstepRegistry(config, comm, backend)
        self.graphed = GraphedFunction(fn, dataclasses.replace(options, config=config), registry=self.registry)
        self.config = config
        self.__name__ = self.graphed.__name__
        self.__doc__ = self.graphed.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.equal_batches:
            return self.graphed(*args, **kwargs)
        rows = self._rows(args)
        rows, agreed = self.agree(args, kwargs, rows)
        if rows == agreed:
            return self.graphed(*args, **kwargs)
        return self._padded_call(args, kwargs, rows, agreed)

    def agree(self, args: Sequence[Any], kwargs: dict[str, Any], rows: int) -> tuple[int, int]:
        """(this rank's rows, the largest over ranks), after checking every rank's signature code."""
        batch = self.graphed.batch_argnums
        code = signature_code(args, kwargs, batch, self.graphed.backend.is_array)
        most, code_max, neg_code_min = (int(v) for v in self.comm.agree_max(
            np.array([rows, code, -code], dtype=np.int64)))
        if code_max != -neg_code_min:
            raise DistributedError(
                f"the ranks called {self.__name__}() with different argument shapes (beyond the batch axis), "
                f"dtypes or static values; every rank must call it alike (rank {self.comm.rank}: "
                f"{self._describe(args)})"
            )
        return rows, most

    def warmup(self, *example_args: Any, sizes: Optional[Sequence[int]] = None, progress: bool = False,
               budget_s: Optional[float] = None) -> int:
        """``GraphedFunction.warmup`` on every rank together (the same ``sizes`` everywhere, largest first).
        ``budget_s`` is refused: each rank's clock would stop it at another size, and a capture is collective."""
        if budget_s is not None:
            raise DistributedError(f"{self.__name__}.warmup(budget_s={budget_s!r}): a time budget is refused under "
                                   "cupygraph.distributed (each rank's clock would stop at another size, and every "
                                   "capture is collective); give sizes= instead, the rest are captured on first call")
        # The sizes are part of what every rank must agree on: each one is a capture on every rank.
        chosen = {"sizes": "all" if sizes is None else str(sorted(set([sizes] if isinstance(sizes, int) else sizes)))}
        self.agree(example_args, chosen, 0)
        return self.graphed.warmup(*example_args, sizes=sizes, progress=progress)

    def stats(self) -> CUDAGraphStats:
        return self.graphed.stats()

    def describe(self) -> str:
        return self.graphed.describe()

    def clear(self) -> None:
        """Drop every graph (collective: every rank clears, so the caches stay equal)."""
        self.graphed.clear()

    # -- a rank with fewer rows ---------------------------------------------------------------------

    def _rows(self, args: Sequence[Any]) -> int:
        for i in self.graphed.batch_argnums:
            shape: tuple[int, ...] = tuple(getattr(args[i], "shape", ())) if i < len(args) else ()
            return int(shape[0]) if shape else 0
        return 0

    def _padded_call(self, args: tuple[Any, ...], kwargs: dict[str, Any], rows: int, agreed: int) -> Any:
        backend = self.graphed.backend
        xp, fill = backend.xp, self.config.pad_value
        padded = list(args)
        grown_at: list[tuple[int, Any]] = []
        for i in self.graphed.batch_argnums:
            arg = args[i]
            if not backend.is_array(arg) or arg.ndim == 0:
                return self.graphed(*args, **kwargs)  # the graphed function names what is wrong
            grown = xp.full((agreed, *arg.shape[1:]), fill, dtype=arg.dtype)
            grown[:rows] = arg
            padded[i] = grown
            grown_at.append((i, grown))
        out = self.graphed(*padded, **kwargs)
        # The function ran on padded copies: what it wrote into this rank's rows goes back to the caller's
        # arrays, as the plain call's write would have changed them (only where it wrote: the same array
        # passed twice must not get one copy's old rows back over the other's write).
        for i, grown in grown_at:
            if not same_bytes(xp, grown[:rows], args[i]):
                args[i][...] = grown[:rows]
        return cut_rows(out, self.graphed.out_batched, rows, agreed, backend.is_array)

    def _describe(self, args: Sequence[Any]) -> str:
        return ", ".join(f"{np.dtype(a.dtype).name}{list(a.shape)}" if self.graphed.backend.is_array(a)
                         else type(a).__name__ for a in args)

    def __repr__(self) -> str:
        return f"<cupygraph.distributed.jit {self.__name__} rank {self.comm.rank} of {self.comm.size}>"


def cut_rows(out: Any, out_batched: Any, rows: int, agreed: int, is_array: Callable[[Any], bool]) -> Any:
    """The outputs of a call padded to ``agreed`` rows, cut back to this rank's ``rows``: those
    ``out_batched`` declares (a bool, or the outputs' structure of bools), else every array whose
    leading axis has ``agreed`` rows."""
    leaves, spec = flatten(out, is_array)
    if out_batched is None or isinstance(out_batched, bool):
        flags = [out_batched if out_batched is not None else (is_array(leaf) and leaf.ndim > 0
                 and leaf.shape[0] == agreed) for leaf in leaves]
    else:
        flags, _ = flatten(out_batched, lambda v: isinstance(v, bool))
    return unflatten(spec, [leaf[:rows] if flag and is_array(leaf) else leaf for leaf, flag in zip(leaves, flags)])


def jit(fn: Optional[Callable[..., Any]] = None, /, *, comm: Communicator, equal_batches: bool = False,
        **options: Any) -> Any:
    """``cupygraph.jit`` for a function every rank calls in lockstep; ``comm`` from ``init()``.

    The options are ``cupygraph.jit``'s. ``equal_batches=True`` skips the per-call agreement on
    the batch when every rank is known to pass the same rows (and the same shapes and dtypes).
    """
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a cupygraph.distributed Communicator (from init()), got {type(comm).__name__}")
    chosen = JitOptions.given("cupygraph.distributed.jit", options)
    if fn is None:
        return lambda f: LockstepFunction(f, comm, chosen, equal_batches=equal_batches)
    return LockstepFunction(fn, comm, chosen, equal_batches=equal_batches)
