"""nvmath-python's library bindings, imported on first use (importing nvmath takes 0.35-0.74 s), and
the per-thread library handles cupygraph.linalg's cuSOLVER and cuSPARSE paths share."""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

import cupy

from ..errors import BackendUnavailableError, CaptureError
from ..reasons import FallbackReason
from ._library import NVMATH_INSTALL
from ._retire import retire, thread_handle


class LazyBinding:
    """``nvmath.bindings.<name>``, imported once on the first call; a clear error naming what needs it."""

    def __init__(self, name: str, needed_by: str):
        """``needed_by`` starts the error, e.g. ``"cupygraph.linalg.spmm needs"``."""
        self.name, self.needed_by = name, needed_by
        self._module: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            if self._module is None:
                try:
                    self._module = importlib.import_module(f"nvmath.bindings.{self.name}")
                except Exception as err:
                    raise BackendUnavailableError(
                        f"{self.needed_by} nvmath-python ({NVMATH_INSTALL}): {type(err).__name__}: {err}"
                    ) from err
            return self._module


class ThreadHandles:
    """One library handle per thread and device, bound to the current stream when taken.

    A handle is made outside captures only (making one allocates); the recording being captured
    holds the handles it used (``backends/holding.py``), so a graph never outlives its handle. Once
    nothing holds a handle (its thread ended, its graphs were released) it is destroyed at the next
    safe point (``_retire.py``).
    """

    def __init__(self, make: Callable[[int], Any], library: str, needed_by: str):
        """``make(device_id)`` gives an object with ``lib``, ``ptr``, ``stream_ptr`` (-1 at first) and
        ``closer()``: a callable that destroys what the object made, holding no reference to it."""
        self._make, self._library, self._needed_by = make, library, needed_by
        self._local = threading.local()

    def get(self, device_id: int) -> Any:
        stream = cupy.cuda.get_current_stream()
        found = thread_handle(self._local.__dict__.setdefault("handles", {}), device_id, stream,
                              lambda: self._made(device_id), self._refusal)
        if found.stream_ptr != int(stream.ptr):
            found.lib.set_stream(found.ptr, int(stream.ptr))
            found.stream_ptr = int(stream.ptr)
        return found

    def _made(self, device_id: int) -> Any:
        made = self._make(device_id)
        weakref.finalize(made, retire, made.closer(), device_id, self._library)
        return made

    def _refusal(self) -> CaptureError:
        return CaptureError(
            f"{FallbackReason.LIBRARY_CALL.text}: {self._needed_by} has no {self._library} handle in this thread "
            "yet, and making one during a capture would allocate; run the function once before capturing (jit's "
            "num_warmups >= 1)")
