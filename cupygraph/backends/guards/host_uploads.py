"""The host backend's mirror of host-to-device uploads (``cupy_uploads``): NumPy's array creators.

On the GPU, ``cupy.asarray(numpy_data)`` inside a recorded function is an upload: refused under
``host_uploads="fallback"``, baked in as a constant under ``"constant"`` / ``"auto"``. The same
function written for NumPy calls ``np.asarray(data)``. While a host capture (warm-ups and capture
run) is open in a thread, ``numpy.asarray`` / ``array`` / ``asanyarray`` / ``ascontiguousarray`` /
``asfortranarray`` go through the same ledger when the user's own code calls them on host data:
anything but the capture run's arrays (``CaptureArray``) and lists of them, 0-d results (a fill
on the GPU) excepted. NumPy's and cupygraph's own calls are not uploads. Warm-ups run on plain
arrays, so they may count a call on an argument as an upload; the ledger matches uploads per
place in the code, so such a call is simply never baked.

* ``"fallback"``: the capture run raises ``CaptureError`` (code ``host_upload``) naming the call;
* ``"constant"`` / ``"auto"``: the capture run gets a copy of a snapshot, and every replay
  (``replaying``) gets the same snapshot again at the same upload, as a GPU graph would upload
  the capture's bytes: the values are frozen at capture on the host too.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from ...frames import called_from_user, location_in_stack
from ..base import ReplayMismatch
from .host_guard import CaptureArray, guarded
from .host_refusal import capture_run_active
from .uploads import CREATORS, UNSUPPORTED_KINDS, Interception, UploadLedger, new_ledger

__all__ = ["intercepted_uploads", "replaying"]



_QUANTILES = ("percentile", "quantile", "nanpercentile", "nanquantile")
"""CuPy's versions upload a list or array ``q`` (``cupy.asarray(q)``): the reference treats it as an upload. A
scalar ``q`` is none: CuPy writes a 0-d array with a fill kernel (``core.array``), as any 0-d creator call."""


_NOT_UPLOADING = ("default_rng",)
"""Library calls whose C code calls NumPy's creators from the user's frame (a seed made into an
array): not uploads; ``cupy.random.default_rng`` keeps its state on the device and captures."""


def _targets() -> list[tuple[Any, str, str]]:
    return ([(np, name, f"numpy.{name}") for name in CREATORS + _QUANTILES]
            + [(np.random, name, f"numpy.random.{name}") for name in _NOT_UPLOADING])


_inside = threading.local()


def _inside_library(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a ``_NOT_UPLOADING`` call with the creators it makes marked as the library's."""
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        return original(*args, **kwargs)
    finally:
        _inside.depth -= 1


def _quantile_q(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[np.ndarray]:
    """The ``q`` of a percentile/quantile call as the host data CuPy would upload, or None."""
    q = args[1] if len(args) > 1 else kwargs.get("q")
    if q is None or _holds_capture_array(q):
        return None
    host = np.asarray(q, dtype=np.float64)
    return None if host.ndim == 0 else host


def _with_q(args: tuple[Any, ...], kwargs: dict[str, Any], q: np.ndarray) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if len(args) > 1:
        return (args[0], q, *args[2:]), kwargs
    return args, {**kwargs, "q": q}


_interception = Interception(_targets)


def _holds_capture_array(obj: Any) -> bool:
    if isinstance(obj, CaptureArray):
        return True
    return isinstance(obj, (list, tuple)) and any(_holds_capture_array(item) for item in obj)


def _called_by_user() -> bool:
    # Frames: this <- handler <- Interception's replacement <- the caller. SciPy's own conversions
    # (``dense @ csr`` rebuilding index arrays) belong to whoever called SciPy, as in host_escapes.
    return not getattr(_inside, "depth", 0) and called_from_user(3, "scipy")


def _upload(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[np.ndarray]:
    """The array a user's creator call makes from host data, or None when it is no upload."""
    obj = args[0] if args else kwargs.get("a", kwargs.get("object"))
    if _holds_capture_array(obj):
        return None
    result = original(*args, **kwargs)
    if isinstance(result, CaptureArray):  # np.array(capture_array, subok=True): the function's own data
        return None
    if not isinstance(result, np.ndarray) or result.ndim == 0 or result.dtype.kind in UNSUPPORTED_KINDS:
        return None
    return result.view(np.ndarray)


class _Recorder:
    def __init__(self, ledger: UploadLedger):
        self.ledger = ledger
        self.snapshots: list[np.ndarray] = []

    def __call__(self, label: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if label.startswith("numpy.random."):
            return _inside_library(original, args, kwargs)
        if not _called_by_user():  # NumPy's and cupygraph's own calls: never uploads, never changed
            return original(*args, **kwargs)
        if label.rsplit(".", 1)[1] in _QUANTILES:
            return self._quantile(label, original, args, kwargs)
        host = _upload(original, args, kwargs)
        if host is None or host.nbytes == 0:
            result = original(*args, **kwargs)
            # The user's np.asarray(x) of the capture's data stays the capture's data, as cupy.asarray(x)
            # is x: a plain array would escape the guard and look like host data to the next call.
            if capture_run_active() and type(result) is np.ndarray and _holds_capture_array(args[:1]):
                return guarded(result)
            return result
        where = location_in_stack(sys._getframe(1))
        data = np.ascontiguousarray(host)
        if not capture_run_active():  # a warm-up: remember, as the GPU backend does
            self.ledger.warmup_upload(label, where, host.shape, host.dtype.str, data)
            return host
        self.ledger.capture_upload(label, where, host.shape, host.dtype.str, host.nbytes, data)
        snapshot = host.copy()
        snapshot.flags.writeable = False
        self.snapshots.append(snapshot)
        return guarded(snapshot.copy())


    def _quantile(self, label: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        q = _quantile_q(args, kwargs)
        if q is None:
            return original(*args, **kwargs)
        where = location_in_stack(sys._getframe(2))
        if not capture_run_active():  # a warm-up
            self.ledger.warmup_upload(label, where, q.shape, q.dtype.str, q)
            return original(*args, **kwargs)
        self.ledger.capture_upload(label, where, q.shape, q.dtype.str, q.nbytes, q)
        snapshot = q.copy()
        snapshot.flags.writeable = False
        self.snapshots.append(snapshot)
        call_args, call_kwargs = _with_q(args, kwargs, snapshot)
        return original(*call_args, **call_kwargs)


class _Replayer:
    """A host replay: the k-th upload returns the capture's k-th snapshot, as a graph re-uploads it."""

    def __init__(self, snapshots: list[np.ndarray]):
        self.snapshots, self.next = snapshots, 0

    def __call__(self, label: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if label.startswith("numpy.random."):
            return _inside_library(original, args, kwargs)
        if label.rsplit(".", 1)[1] in _QUANTILES:
            q = _quantile_q(args, kwargs) if _called_by_user() else None
            if q is None:
                return original(*args, **kwargs)
            snapshot = self._take(label, q)
            call_args, call_kwargs = _with_q(args, kwargs, snapshot)
            return original(*call_args, **call_kwargs)
        host = _upload(original, args, kwargs) if _called_by_user() else None
        if host is None or host.nbytes == 0:
            return original(*args, **kwargs)
        return self._take(label, host).copy()

    def _take(self, label: str, host: np.ndarray) -> np.ndarray:
        """The capture's next snapshot, which must be of ``host``'s shape and dtype."""
        if self.next >= len(self.snapshots) or self.snapshots[self.next].shape != host.shape \
                or self.snapshots[self.next].dtype != host.dtype:
            raise ReplayMismatch(f"{label}{location_in_stack(sys._getframe(2))} uploads {host.dtype}"
                                 f"{list(host.shape)} on replay, which is not the upload the capture baked in")
        snapshot = self.snapshots[self.next]
        self.next += 1
        return snapshot


@contextmanager
def intercepted_uploads(fn: Any = None) -> Iterator[_Recorder]:
    """Warm-ups and capture run of one host recording of ``fn``: uploads go through the ledger (its
    module's own names for the creators too: ``from numpy import asarray``)."""
    recorder = _Recorder(new_ledger())
    with _interception.active(recorder, fn):
        yield recorder
    recorder.ledger.raise_refusal()


@contextmanager
def replaying(snapshots: list[np.ndarray], fn: Any = None) -> Iterator[None]:
    """A replay of a recording of ``fn`` that baked uploads in: each returns its snapshot again."""
    replayer = _Replayer(snapshots)
    with _interception.active(replayer, fn):
        yield
    if replayer.next != len(snapshots):
        raise ReplayMismatch(f"the replay made {replayer.next} host upload(s) where the capture baked in "
                             f"{len(snapshots)}")

