"""Host-to-device uploads during a CuPy capture: refused by name, or baked in from pinned snapshots.

CuPy refuses an upload on a capturing stream inside compiled code (``MemoryPointer.
copy_from_host_async`` checks ``streamIsCapturing``), which Python cannot reach. The uploads
come from Python, though: ``cupy.asarray`` / ``array`` / ``asanyarray`` / ``ascontiguousarray`` /
``asfortranarray`` (what cupyx's filters, ``percentile`` and user code call, looked up on the
``cupy`` module at every call) and ``ndarray.set``. While a capture (and its warm-ups) runs in
a thread, those names are replaced (``uploads.Interception``; restored when the last capture
ends, every other thread keeps the originals' behaviour). In that thread:

* a warm-up upload runs as CuPy runs it; the ledger remembers its bytes, and the first warm-up
  makes a pinned snapshot buffer for it (so nothing is allocated on the host during capture);
* a capture upload, under ``host_uploads="fallback"``, raises ``CaptureError`` naming the call,
  its size and the user's line; else its bytes go into the snapshot and one ``cudaMemcpyAsync``
  from it is recorded (a memcpy node of the graph). The recording holds the snapshot
  (``holding.hold``), so every replay uploads the bytes the capture saw, until it is released.

Uploads CuPy makes elsewhere (``x[...] = numpy_array``) still fail with CuPy's own error, which
``cupy_failures`` reports as ``host_upload`` with the user's line.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import cupy
import numpy

from ...frames import location_in_stack
from ..capturing import stream_is_capturing
from ..holding import hold
from .uploads import CREATORS, UNSUPPORTED_KINDS, Interception, UploadLedger, new_ledger

__all__ = ["intercepted_uploads"]



def _targets() -> list[tuple[Any, str, str]]:
    return [(cupy, name, f"cupy.{name}") for name in CREATORS] + [(cupy.ndarray, "set", "cupy.ndarray.set")]


_interception = Interception(_targets)


class _Snapshot:
    """Pinned host memory a graph's memcpy node reads at every replay."""

    def __init__(self, nbytes: int):
        self.memory = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        self.ptr, self.nbytes = int(self.memory.ptr), nbytes

    def held_regions(self) -> list[tuple[int, int, str]]:
        return []  # host memory: nothing for the device-address audit


def _on_device(obj: Any) -> bool:
    if isinstance(obj, cupy.ndarray) or hasattr(obj, "__cuda_array_interface__"):
        return True
    return isinstance(obj, (list, tuple)) and any(_on_device(item) for item in obj)


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, default: Any = None) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)


def _host_array(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[numpy.ndarray]:
    """The bytes a creator call would upload, laid out as CuPy lays them; None when it uploads nothing
    (device data, a scalar CuPy writes with a fill kernel, a type CuPy refuses anyway)."""
    obj = _argument(args, kwargs, 0, "a" if label != "cupy.array" else "obj")
    if obj is None or _on_device(obj) or not isinstance(obj, (numpy.ndarray, numpy.generic, list, tuple)):
        return None
    dtype = _argument(args, kwargs, 1, "dtype")
    ndmin = int(kwargs.get("ndmin", args[5] if label == "cupy.array" and len(args) > 5 else 0))
    try:
        host = numpy.array(obj, dtype=dtype, ndmin=ndmin)
    except Exception:  # CuPy raises its own error for it
        return None
    if host.ndim == 0 or host.dtype.kind in UNSUPPORTED_KINDS:
        return None
    order = _argument(args, kwargs, 3 if label == "cupy.array" else 2, "order")
    fortran = label == "cupy.asfortranarray" or order in ("F", "f") or (
        order in (None, "K", "k", "A", "a") and isinstance(obj, numpy.ndarray)
        and obj.flags.f_contiguous and not obj.flags.c_contiguous and label != "cupy.ascontiguousarray")
    return numpy.asfortranarray(host) if fortran else numpy.ascontiguousarray(host)



class _Handler:
    def __init__(self, ledger: UploadLedger):
        self.ledger = ledger

    def __call__(self, label: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if label == "cupy.ndarray.set":
            return self._set(original, args, kwargs)
        host = _host_array(label, args, kwargs)
        if host is None or host.nbytes == 0:
            return original(*args, **kwargs)
        stream = cupy.cuda.get_current_stream()
        if not stream_is_capturing(stream):
            self._remember(label, host)
            return original(*args, **kwargs)
        out = cupy.empty(host.shape, dtype=host.dtype, order="F" if host.flags.f_contiguous and host.ndim > 1 else "C")
        self._bake(label, host, int(out.data.ptr), stream)
        return out

    def _set(self, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        target, arr = args[0], _argument(args, kwargs, 1, "arr")
        stream = _argument(args, kwargs, 2, "stream") or cupy.cuda.get_current_stream()
        usable = (isinstance(arr, numpy.ndarray) and arr.dtype == target.dtype and arr.shape == target.shape
                  and (target._c_contiguous or target._f_contiguous) and arr.nbytes > 0)
        if not usable:
            return original(*args, **kwargs)  # CuPy's own checks and errors
        host = numpy.ascontiguousarray(arr) if target._c_contiguous else numpy.asfortranarray(arr)
        if not stream_is_capturing(stream):
            self._remember("cupy.ndarray.set", host)
            return original(*args, **kwargs)
        with cupy.cuda.Device(target.device.id):
            self._bake("cupy.ndarray.set", host, int(target.data.ptr), stream)
        return None

    def _remember(self, label: str, host: numpy.ndarray) -> None:
        # A pinned buffer now, outside the capture: the capture's upload here takes the first run's.
        if self.ledger.mode == "fallback":  # the capture refuses it anyway: no pinned memory for it
            return
        self.ledger.warmup_upload(label, _where(), host.shape, host.dtype.str, host, _Snapshot(host.nbytes))

    def _bake(self, label: str, host: numpy.ndarray, dst: int, stream: Any) -> None:
        snapshot = self.ledger.capture_upload(label, _where(), host.shape, host.dtype.str, host.nbytes, host)
        if snapshot.nbytes < host.nbytes:  # the ledger matched shapes and dtypes: cannot happen
            raise RuntimeError(f"cupygraph: snapshot of {snapshot.nbytes} bytes for an upload of {host.nbytes}")
        ctypes.memmove(snapshot.ptr, host.ctypes.data, host.nbytes)
        runtime = cupy.cuda.runtime
        # Straight to the runtime: CuPy's own copy refuses a capturing stream; a copy from pinned
        # memory is a plain memcpy node of the graph.
        runtime.memcpyAsync(dst, snapshot.ptr, host.nbytes, runtime.memcpyHostToDevice, int(stream.ptr))
        hold(snapshot)


def _where() -> str:
    return location_in_stack(sys._getframe(1))


@contextmanager
def intercepted_uploads(fn: Any = None) -> Iterator[UploadLedger]:
    """Uploads in this thread go through the ledger meanwhile (warm-ups and capture of ``fn``'s graph;
    its module's own names for the creators too: ``from cupy import asarray``)."""
    ledger = new_ledger()
    with _interception.active(_Handler(ledger), fn):
        yield ledger
    ledger.raise_refusal()
