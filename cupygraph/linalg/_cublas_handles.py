"""cuBLAS and cuBLASLt handles (one per thread and device) and workspaces (one per thread and stream).

Contract:

* A handle is used by one thread only (cuBLAS handles are not thread-safe); each call binds it to
  the caller's current stream and that stream's workspace (``cublasSetStream`` resets the
  workspace, so both are set together, only when the stream changes).
* A workspace is preallocated device memory cuBLAS uses instead of allocating its own, so a GEMM
  allocates nothing while a graph is being captured, and GEMMs captured on one stream always use
  the same memory. There is one per thread and stream, never shared: two streams may run at once,
  and two threads' GEMMs on one stream (the null stream, say) interleave, since a GEMM is several
  kernels (split-K partial sums written to the workspace, then a reduction reading them): a shared
  workspace gave one thread's reduction the other's partial sums (seen on an H200). Eagerly used
  streams keep theirs until ``release_unused()`` or until their thread has ended; inside a cupygraph
  capture (``holding``) the workspace is allocated by the first warm-up from the family's pool and
  then lives exactly as long as the recordings that hold it, so it is freed with the graphs.
* A recording holds the handle and workspace its GEMM nodes were captured with. A handle that
  nothing holds any more (its thread ended and its graphs were released) is destroyed at the next
  safe point: ``cublasDestroy`` synchronises the device, which would break a capture in progress,
  so it waits until no cupygraph capture is open and the calling thread is not capturing.
* Nothing is created during a capture: a capture that reaches a GEMM on a stream or thread with
  no handle or workspace yet raises ``CaptureError`` saying to warm up first (``jit`` does, with
  the default ``num_warmups=1``; ``prepare()`` does it by hand).
* The fused GEMMs (``_gemm_lt``) run on a cuBLASLt handle, one per thread and device like cuBLAS's,
  which also keeps that thread's cuBLASLt plans (``_lt_plans.PlanCache``), and on the same
  per-thread, per-stream workspace, passed to each ``cublasLtMatmul``: the two libraries' GEMMs on
  one stream of one thread run one after the other, so they share it safely.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from ..backends.capturing import stream_is_capturing
from ..backends.holding import hold, holding_active
from ..errors import CaptureError
from ..reasons import FallbackReason
from ._binding import CUBLAS, Binding
from ._library import Library
from ._lt_binding import CUBLASLT, LtBinding
from ._lt_plans import PlanCache
from ._retire import destroy_retired, pending, retire, thread_handle

WORKSPACE_HOPPER = 32 << 20  # cuBLAS's recommendation for sm_90 and newer
WORKSPACE_OTHER = 4 << 20


def workspace_bytes(device_id: int) -> int:
    import cupy

    major = int(cupy.cuda.Device(device_id).compute_capability[:-1] or 0)
    return WORKSPACE_HOPPER if major >= 9 else WORKSPACE_OTHER


def _not_prepared(what: str, stream: Any) -> CaptureError:
    return CaptureError(
        f"{FallbackReason.LIBRARY_CALL.text}: cupygraph.linalg has no {what} for stream 0x{int(stream.ptr):x} "
        "in this thread yet, and making one during a capture would allocate memory; run the function once "
        "before capturing (jit's num_warmups >= 1) or call cupygraph.linalg.prepare() on that stream")



class Workspace:
    """Device memory one stream's GEMMs use as cuBLAS's workspace."""

    def __init__(self, device_id: int, stream: Any, nbytes: int):
        import cupy

        # The current allocator: the family's pool under a cupygraph capture, else CuPy's default.
        self.memory = cupy.cuda.alloc(nbytes)
        self.ptr, self.nbytes, self.device_id = int(self.memory.ptr), nbytes, device_id
        self._stream = weakref.ref(stream)
        with _lock:
            _workspaces.add(self)

    def serves(self, stream: Any) -> bool:
        """False once the stream object it was made for is gone (its handle value may be reused)."""
        return self._stream() is not None

    def held_regions(self) -> list[tuple[int, int, str]]:
        return [(self.ptr, self.nbytes, "cupygraph.linalg's cuBLAS workspace, held by the graph")]


class LibraryHandle:
    """One thread's handle of ``library`` on one device, made by the binding this process uses, counted
    while alive and destroyed at a safe point once nothing holds it (``_retire``)."""

    library: Library[Any]

    def __init__(self, device_id: int):
        self.lib: Any = self.library.binding()
        self.device_id = device_id
        self.ptr: int = self.lib.create()
        with _lock:
            _handles.add(self)
        weakref.finalize(self, retire, self.closer(), device_id, self.library.name)

    def closer(self) -> Callable[[], None]:
        """What destroys this handle, holding no reference to the handle object."""
        return functools.partial(self.lib.destroy, self.ptr)


class Handle(LibraryHandle):
    """One thread's cuBLAS handle on one device, and the stream/workspace/pointer mode it is set to."""

    library = CUBLAS
    lib: Binding

    def __init__(self, device_id: int):
        super().__init__(device_id)
        self.stream_ptr: Optional[int] = None
        # Weak: a handle must not keep a graph's workspace alive after the graph is released.
        self._workspace: Any = lambda: None
        self.pointer_mode = 0

    def bind(self, stream_ptr: int, workspace: Workspace) -> None:
        if self.stream_ptr != stream_ptr or self._workspace() is not workspace:
            self.lib.set_stream(self.ptr, stream_ptr)
            self.lib.set_workspace(self.ptr, workspace.ptr, workspace.nbytes)  # set_stream dropped the old one
            self.stream_ptr, self._workspace = stream_ptr, weakref.ref(workspace)

    def set_pointer_mode(self, mode: int) -> None:
        if mode != self.pointer_mode:
            self.lib.set_pointer_mode(self.ptr, mode)
            self.pointer_mode = mode


class LtHandle(LibraryHandle):
    """One thread's cuBLASLt handle on one device, with that thread's plans (``_lt_plans``)."""

    library = CUBLASLT
    lib: LtBinding

    def __init__(self, device_id: int):
        self.plans = PlanCache(self.library.binding())  # before the handle: its closer closes them too
        super().__init__(device_id)

    def closer(self) -> Callable[[], None]:
        return functools.partial(_close_lt, self.lib, self.ptr, self.plans)


def _close_lt(lib: LtBinding, ptr: int, plans: PlanCache) -> None:
    plans.close()
    lib.destroy(ptr)


_lock = threading.RLock()  # re-entrant: weak containers' callbacks may run under it
_local = threading.local()
_live: weakref.WeakValueDictionary[tuple[int, int, int], Workspace] = weakref.WeakValueDictionary()
_eager: dict[tuple[int, int, int], Workspace] = {}
_workspaces: weakref.WeakSet[Workspace] = weakref.WeakSet()
_handles: weakref.WeakSet[LibraryHandle] = weakref.WeakSet()


def _stream_key(device_id: int, stream: Any) -> tuple[int, int, int]:
    """A workspace's key: the calling thread's (module docstring), on ``stream`` of ``device_id``
    (cudaStreamPerThread, one handle value, is a different stream in every thread too)."""
    return device_id, int(stream.ptr), threading.get_ident()


def _forget_ended_threads() -> None:
    """Drop the eager workspaces of threads that have ended (called under ``_lock``)."""
    alive = {thread.ident for thread in threading.enumerate()}
    for key in [key for key in _eager if key[2] not in alive]:
        del _eager[key]


def workspace_for(device_id: int, stream: Any) -> Workspace:
    key = _stream_key(device_id, stream)
    with _lock:
        workspace = _live.get(key)
        if workspace is None or not workspace.serves(stream):
            if stream_is_capturing(stream):
                raise _not_prepared("cuBLAS workspace", stream)
            _forget_ended_threads()
            workspace = Workspace(device_id, stream, workspace_bytes(device_id))
            _live[key] = workspace
        if not holding_active() and _eager.get(key) is not workspace:
            _eager[key] = workspace  # a stream used outside captures keeps its workspace
    if holding_active():
        hold(workspace)
    return workspace


H = TypeVar("H", bound=LibraryHandle)


def _thread_handle(kind: type[H], device_id: int, stream: Any) -> H:
    """This thread's handle of ``kind`` on ``device_id``, made on first use (never while ``stream``
    captures), held by the graph being recorded."""
    name = kind.library.name
    found: H = thread_handle(_local.__dict__.setdefault(name, {}), device_id, stream, lambda: kind(device_id),
                             lambda: _not_prepared(f"{name} handle", stream))
    return found


def handle_for(device_id: int, stream: Any) -> Handle:
    """This thread's handle on ``device_id``, bound to ``stream`` and its workspace."""
    handle = _thread_handle(Handle, device_id, stream)
    handle.bind(int(stream.ptr), workspace_for(device_id, stream))
    return handle


def lt_handle_for(device_id: int, stream: Any) -> tuple[LtHandle, Workspace]:
    """This thread's cuBLASLt handle on ``device_id`` and the workspace of ``stream`` (cuBLAS's)."""
    return _thread_handle(LtHandle, device_id, stream), workspace_for(device_id, stream)


def release_unused() -> dict[str, int]:
    """Let go of the workspaces kept for eagerly used streams and destroy handles nothing holds.

    Workspaces and handles that captured graphs still hold stay until those graphs are released.
    Returns what is still alive afterwards (``resources()``).
    """
    import gc

    with _lock:
        _eager.clear()
    gc.collect()
    destroy_retired()
    return resources()


def resources() -> dict[str, int]:
    """Live cuBLAS and cuBLASLt handles (not yet destroyed), workspaces and workspace bytes, in this process."""
    with _lock:
        live = [handle.library.name for handle in _handles]
        workspaces = list(_workspaces)
    handles, lt_handles = (live.count(name) + pending(name) for name in (CUBLAS.name, CUBLASLT.name))
    return {"handles": handles, "lt_handles": lt_handles, "workspaces": len(workspaces),
            "workspace_bytes": sum(w.nbytes for w in workspaces)}
