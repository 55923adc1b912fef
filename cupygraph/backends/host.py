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

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..pytree import flatten
from .base import Backend, Recording, ReplayMismatch
from .foreign import watch_unowned
from .host_binding import HostBinder, host_facts
from .host_guard import guarded, plain_outputs, refusing


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _same_value(old: Any, new: Any) -> bool:
    """Whether a non-array output is the capture's value again (NaN equals NaN)."""
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    try:
        if isinstance(old, float) and math.isnan(old):
            return math.isnan(new)
        return bool(old == new)
    except Exception:  # a value whose comparison fails cannot be shown to be the same
        return False


class HostRecording(Recording):
    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], outputs: Any,
                 piecewise: bool = False):
        self._fn, self._args, self._kwargs = fn, list(args), kwargs
        self.outputs = outputs
        self._leaves, self._spec = flatten(outputs, _is_numpy)
        self.nbytes = sum(leaf.nbytes for leaf in self._leaves if _is_numpy(leaf))
        self._piecewise = piecewise

    def binder(self, static: Sequence[Any], labels: Sequence[str], leaves: Sequence[Any], *, bind_outputs: bool,
               counts: tuple[Any, Any], name: str, constants: Sequence[tuple[int, Any]] = ()) -> HostBinder:
        facts = host_facts(self._args, self._leaves, self._piecewise)
        return HostBinder(self._args, facts, static, labels, leaves, bind_outputs, counts, name, constants)

    def launch(self) -> None:
        fresh, spec = flatten(self._fn(*self._args, **self._kwargs), _is_numpy)
        if spec != self._spec or len(fresh) != len(self._leaves):
            raise ReplayMismatch(
                f"the function returned another output structure on replay than at capture ({len(fresh)} "
                f"outputs, {len(self._leaves)} at capture); a graphed function must return the same structure "
                "every call"
            )
        for i, (static, new) in enumerate(zip(self._leaves, fresh)):
            if not _is_numpy(static):
                if not _same_value(static, new):
                    raise ReplayMismatch(
                        f"output {i} is {type(new).__name__} {new!r} on replay but was {static!r} at capture; "
                        "a graph would have returned the capture's value (a value from Python state or the data)"
                    )
                continue
            if new is static:
                continue
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
        num_warmups: int, capture_mode: str, gc_freeze: bool, piecewise: bool = False,
    ) -> HostRecording:
        for _ in range(num_warmups):
            fn(*args, **kwargs)
        # The capture run sees views of the same buffers that refuse what CuPy refuses under capture.
        with refusing(piecewise):
            outputs = fn(*[guarded(a) for a in args], **kwargs)
        # The caller gets plain arrays; NumPy scalars become 0-d arrays (rewritten in place, as CuPy returns).
        recording = HostRecording(fn, args, kwargs, plain_outputs(outputs), piecewise)
        # What the GPU backend's audit reports, the reference reports too (warning, debug checks).
        # One warning per array and family (set here: subclasses need not call an __init__).
        warned = self.__dict__.setdefault("_foreign_warned", set())
        recording.watches = watch_unowned(fn, args, kwargs, _is_numpy, np.may_share_memory, warned)
        return recording
