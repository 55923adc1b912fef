"""Host data uploaded while a function is recorded: refused, or baked into the graph as a constant.

CuPy refuses a host-to-device copy on a capturing stream (``cupy.asarray(numpy_array)``, the
filter weights ``cupyx.scipy.ndimage.gaussian_filter`` uploads, ``ndarray.set``). The config's
``host_uploads`` says what a capture does with one instead:

* ``"auto"`` (the default, issue 29): ``"constant"`` for an upload whose bytes were identical in
  every warm-up run and in the capture; any upload that differed (or a capture without warm-ups,
  where nothing can be compared: ``num_warmups=0``, or a capture after the call's own run wrote into
  an array the function reads by address, ``cache/first_call.py``) fails the capture naming the
  call. Values that change only between calls (a counter, the time) cannot be told from constants
  this way: ``auto`` is a heuristic, not a proof.
* ``"fallback"``: the capture fails with reason ``host_upload``, naming the call, its size and the
  user's line; the key runs eagerly. The strict choice: it can never return a stale value.
* ``"constant"``: the upload becomes a copy from a snapshot the recording owns (pinned host
  memory on the GPU): every replay uploads the bytes the capture saw. The values are frozen at
  capture, the way ``jax.jit`` treats NumPy arrays inside a traced function, without comparing.

The k-th upload of the capture run is matched with the k-th upload of each warm-up run (same
call site, shape and dtype). The GPU backend makes the snapshot buffers during the warm-ups, so
the capture itself allocates no pinned memory. ``UploadLedger`` is that bookkeeping, shared by
both backends (``cupy_uploads`` intercepts CuPy, ``host_uploads`` NumPy for the reference).

Neutral on purpose: imports only foundation modules, no array library.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from ...errors import CaptureError
from ...hints import HOST_UPLOAD_HINT
from ...reasons import FallbackReason

__all__ = ["CREATORS", "MODES", "UNSUPPORTED_KINDS", "UNTOUCHED", "BakedUpload", "Interception", "UploadLedger",
           "new_ledger", "upload_policy"]

MODES = ("fallback", "constant", "auto")
CREATORS = ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray")
"""The array creators intercepted during a capture, in ``cupy`` (GPU) and ``numpy`` (the host mirror)."""
UNSUPPORTED_KINDS = frozenset("OUSVMm")
"""dtype kinds never baked as constants (objects, strings, datetimes)."""


@dataclasses.dataclass(frozen=True)
class BakedUpload:
    """One upload a recording replays from its own snapshot."""

    call: str
    """What uploaded: ``cupy.asarray``, ``ndarray.set``, ``numpy.array``."""
    where: str
    """The user's line: `` (at file:line: code)``."""
    shape: tuple[int, ...]
    dtype: str
    nbytes: int

    def describe(self) -> str:
        return _what(self.call, self.where, self.shape, self.dtype, self.nbytes)


def _what(call: str, where: str, shape: tuple[int, ...], dtype: str, nbytes: int) -> str:
    return f"{call} of {dtype}{list(shape)} ({nbytes} bytes){where}"


@dataclasses.dataclass
class _Seen:
    call: str
    where: str
    shape: tuple[int, ...]
    dtype: str
    digest: bytes


class UploadLedger:
    """The uploads of one capture: remembered in the warm-ups, decided at the capture run.

    Uploads are matched per place in the code (call and user's line): the capture's j-th upload
    there with the j-th of each warm-up run there (each run makes as many there). A warm-up may
    see more calls at a place than the capture bakes (the host reference cannot tell a NumPy
    warm-up argument from host data); those are never baked.
    """

    def __init__(self, mode: str = "fallback", num_warmups: int = 0, warmups_skipped: bool = False):
        if mode not in MODES:
            raise ValueError(f"host_uploads must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode, self.num_warmups = mode, num_warmups
        self.warmups_skipped = warmups_skipped
        """The config asks for warm-ups but this capture runs none (``cache/first_call.py``)."""
        self.warmup: dict[tuple[str, str], list[_Seen]] = {}
        self.slots: dict[tuple[str, str], list[Any]] = {}
        """Backend snapshot buffers per place, one per warm-up upload in order: the capture's j-th
        upload there bakes from the j-th (the first run's)."""
        self.baked: list[BakedUpload] = []
        self.refusal: Optional[CaptureError] = None
        """The first refused upload: the capture fails with it even when the function caught it."""
        self._at_capture: dict[tuple[str, str], int] = {}

    def warmup_upload(self, call: str, where: str, shape: tuple[int, ...], dtype: str, data: Any,
                      slot: Any = None) -> None:
        """Remember a warm-up upload and the buffer the backend made for it (``fallback`` never bakes
        one: nothing to remember; only ``auto`` compares bytes: the digest only there)."""
        if self.mode == "fallback":
            return
        digest = _digest(data) if self.mode == "auto" else b""
        self.warmup.setdefault((call, where), []).append(_Seen(call, where, shape, dtype, digest))
        self.slots.setdefault((call, where), []).append(slot)

    def capture_upload(self, call: str, where: str, shape: tuple[int, ...], dtype: str, nbytes: int,
                       data: Any) -> Any:
        """The capture run uploads: the slot to bake it from, or ``CaptureError`` naming it."""
        place = (call, where)
        index = self._at_capture.get(place, 0)
        self._at_capture[place] = index + 1
        what = _what(call, where, shape, dtype, nbytes)
        if self.mode == "fallback":
            raise self._refused(what, f'host_uploads is "fallback", which never freezes host data: {HOST_UPLOAD_HINT}')
        seen = self.warmup.get(place, [])
        runs = max(self.num_warmups, 0)
        if runs == 0:
            raise self._refused(what, _NO_WARMUP_SKIPPED if self.warmups_skipped else _NO_WARMUP)
        if not seen or len(seen) % runs:
            raise self._refused(what, f"the capture uploads here but the {runs} warm-up run(s) made {len(seen)} "
                                "upload(s) here, not the same number each: the function takes another path when "
                                "capturing; move the upload out of the function (pass the array as an argument)")
        per_run = len(seen) // runs
        if index >= per_run:
            raise self._refused(what, "the warm-up runs made fewer uploads here than the capture")
        digest = _digest(data) if self.mode == "auto" else b""
        for run in range(runs):
            earlier = seen[run * per_run + index]
            if (earlier.shape, earlier.dtype) != (shape, dtype):
                raise self._refused(what, f"a warm-up run uploaded {earlier.dtype}{list(earlier.shape)} here instead")
            if self.mode == "auto" and earlier.digest != digest:
                raise self._refused(what, "host_uploads is \"auto\" and the uploaded bytes differed between the "
                                          "warm-up runs and the capture, so they are no constant; compute them on the "
                                          "device, or pass them as an argument")
        self.baked.append(BakedUpload(call, where, shape, dtype, nbytes))
        return self.slots[place][index]

    def _refused(self, what: str, why: str) -> CaptureError:
        err = CaptureError(f"{FallbackReason.HOST_UPLOAD.text}: {what}; {why}")
        if self.refusal is None:
            self.refusal = err
        return err

    def raise_refusal(self) -> None:
        """After the capture run: a refusal the function swallowed (a library's ``except Exception``
        taking another path than the warm-up did) still fails the capture."""
        if self.refusal is not None:
            raise CaptureError(str(self.refusal))


_NO_WARMUP = ("host uploads become constants only when every warm-up run made the same uploads as the capture, "
              "and this capture runs none: run at least one warm-up (num_warmups >= 1), or pass the data as an "
              "argument")
_NO_WARMUP_SKIPPED = ("host uploads become constants only when every warm-up run made the same uploads as the "
                      "capture, and this capture runs no warm-up: the call's own run wrote into an array the "
                      "function reads by address, where a warm-up would write again; pass the data as an argument, "
                      "or make it on the device")


def _digest(data: Any) -> bytes:
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).digest()


_local = threading.local()


@contextmanager
def upload_policy(mode: str, num_warmups: int, warmups_skipped: bool = False) -> Iterator[None]:
    """What the captures in this thread do with host uploads meanwhile (the front door opens it
    around each capture with the config's ``host_uploads``, the capture's warm-ups, and whether it
    skips the config's warm-ups, ``cache/first_call.py``)."""
    previous = getattr(_local, "policy", None)
    _local.policy = (mode, num_warmups, warmups_skipped)
    try:
        yield
    finally:
        _local.policy = previous


def new_ledger() -> UploadLedger:
    """A ledger for the capture a backend starts now, under this thread's policy (``"fallback"``
    for a backend used without the front door)."""
    policy: Optional[tuple[str, int, bool]] = getattr(_local, "policy", None)
    return UploadLedger() if policy is None else UploadLedger(*policy)


Handler = Callable[[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]

UNTOUCHED: Any = object()
"""What a handler returns to leave the call to the original function, as if nothing intercepted it (the
wrapper calls it: ``frames`` passes over the wrapper's frame, so the caller is still the user's line)."""


class Interception:
    """Functions replaced while at least one thread records, restored when the last one ends.

    ``targets()`` lists ``(owner, attribute, label)``. A replaced function calls the handler of
    the calling thread's open ``active`` scope with ``(label, original, args, kwargs)``, and returns
    what it returns (``UNTOUCHED``: the original's result); in every other thread it is the original,
    so work elsewhere is untouched (it pays one Python call).
    """

    def __init__(self, targets: Callable[[], list[tuple[Any, str, str]]]):
        self._targets = targets
        self._lock = threading.Lock()
        self._scopes = 0
        self._saved: list[tuple[Any, str, bool, Any, Any]] = []
        self._local = threading.local()
        self._names: dict[tuple[int, str], list[Any]] = {}
        """Names a function's module bound to a replaced function (``from numpy import asarray``):
        (id of the namespace, name) -> [namespace, original, replacement, scopes using it]."""

    @contextmanager
    def active(self, handler: Handler, fn: Any = None) -> Iterator[None]:
        """``handler`` sees this thread's calls meanwhile; with ``fn``, also the calls its module
        makes through names it imported directly (its globals are patched as the modules are)."""
        names: list[tuple[int, str]] = []
        with self._lock:
            if self._scopes == 0:
                self._install()
            self._scopes += 1
            try:
                self._patch_names(fn, names)
            except BaseException:  # (not expected) undo what this scope did, then report it
                self._leave(names)
                raise
        previous = getattr(self._local, "handler", None)
        self._local.handler = handler
        try:
            yield
        finally:
            self._local.handler = previous
            with self._lock:
                self._leave(names)

    def _leave(self, names: list[tuple[int, str]]) -> None:
        """End one scope (under the lock): its names back, and the modules' own once no scope is left."""
        self._unpatch_names(names)
        self._scopes -= 1
        if self._scopes == 0:
            self._restore()

    def _patch_names(self, fn: Any, used: list[tuple[int, str]]) -> None:
        """Patch the names ``fn``'s module bound to replaced functions; each one is in ``used`` from the
        moment it counts, so a scope that ends early undoes exactly what it did."""
        namespace = function_globals(fn)
        if namespace is None:
            return
        # By id: the originals are held by ``_saved``, so an equal id is the very object.
        replacements = {id(value): replacement for _, _, _, value, replacement in self._saved if value is not None}
        for name, value in list(namespace.items()):
            key = (id(namespace), name)
            entry = self._names.get(key)
            if entry is None:
                replacement = replacements.get(id(value))
                if replacement is None:
                    continue
                entry = self._names[key] = [namespace, value, replacement, 0]
                namespace[name] = replacement
            entry[3] += 1
            used.append(key)

    def _unpatch_names(self, used: list[tuple[int, str]]) -> None:
        for key in used:
            entry = self._names[key]
            entry[3] -= 1
            if entry[3] == 0:
                namespace, original, replacement, _ = self._names.pop(key)
                if namespace.get(key[1]) is replacement:  # rebound by the module since: its own now
                    namespace[key[1]] = original

    def _install(self) -> None:
        for owner, name, label in self._targets():
            own = vars(owner)
            replacement = self._replacement(getattr(owner, name), label)
            self._saved.append((owner, name, name in own, own.get(name), replacement))
            setattr(owner, name, replacement)

    def _restore(self) -> None:
        for owner, name, had, value, replacement in reversed(self._saved):
            if vars(owner).get(name) is not replacement:  # replaced again by someone else since: theirs now
                continue
            if had:
                setattr(owner, name, value)
            else:  # inherited (``cupy.ndarray.set`` lives on its Cython base): uncover it again
                delattr(owner, name)
        self._saved.clear()

    def _replacement(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        local = self._local

        @functools.wraps(original)
        def intercepted(*args: Any, **kwargs: Any) -> Any:
            handler: Optional[Handler] = getattr(local, "handler", None)
            result = UNTOUCHED if handler is None else handler(label, original, args, kwargs)
            return original(*args, **kwargs) if result is UNTOUCHED else result

        return intercepted


def function_globals(fn: Any) -> Optional[dict[str, Any]]:
    """The module namespace ``fn`` looks its names up in (through ``functools.partial`` and
    decorators that set ``__wrapped__``), or None (a builtin, a callable object)."""
    for _ in range(16):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    namespace = getattr(fn, "__globals__", None)
    return namespace if isinstance(namespace, dict) else None
