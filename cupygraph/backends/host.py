"""The NumPy reference backend: same static buffers and padding as the GPU, no CUDA graphs.

It exists so everything above the backends runs for real where no GPU is present (CPU CI,
laptops): a "replay" re-executes the function on the static buffers and writes the results into
the buffers the capture returned, so view and copy semantics match the GPU backend's. It never
claims to have captured a CUDA graph (``name == "host"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import CaptureError
from ..foreign import watch_unowned
from ..pytree import flatten, unflatten
from .base import Backend, Recording


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


class HostRecording(Recording):
    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], outputs: Any):
        self._fn, self._args, self._kwargs = fn, list(args), kwargs
        self.outputs = outputs
        self._leaves, _ = flatten(outputs, _is_numpy)
        self.nbytes = sum(leaf.nbytes for leaf in self._leaves if _is_numpy(leaf))

    def launch(self) -> None:
        fresh, _ = flatten(self._fn(*self._args, **self._kwargs), _is_numpy)
        if len(fresh) != len(self._leaves):
            raise CaptureError(
                f"the function returned {len(fresh)} outputs on replay but {len(self._leaves)} at capture; "
                "a graphed function must return the same structure every call"
            )
        for i, (static, new) in enumerate(zip(self._leaves, fresh)):
            if not _is_numpy(static):
                continue
            if new is static:
                continue
            new = np.asarray(new)
            if new.shape != static.shape or new.dtype != static.dtype:
                raise CaptureError(
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
        outputs = fn(*args, **kwargs)
        leaves, spec = flatten(outputs, _is_numpy)
        if any(isinstance(leaf, np.generic) for leaf in leaves):
            # A NumPy scalar cannot be rewritten in place: hold it as a 0-d array (as CuPy returns).
            outputs = unflatten(spec, [np.asarray(v) if isinstance(v, np.generic) else v for v in leaves])
        recording = HostRecording(fn, args, kwargs, outputs)
        # What the GPU backend's audit reports, the reference reports too (warning, debug checks).
        # One warning per array and family (set here: subclasses need not call an __init__).
        warned = self.__dict__.setdefault("_foreign_warned", set())
        recording.watches = watch_unowned(fn, args, kwargs, _is_numpy, np.may_share_memory, warned)
        return recording
