"""The life of a library handle (cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE): taken once per thread and device
(``thread_handle``), held by the graphs that use it, and once nothing holds it, destroyed later at a
safe point (one list for every library).

A handle's finaliser may run in any thread at any allocation, inside a capture too, where
destroying a handle (which synchronises) would break the capture. So the finaliser only queues
its destroy call; ``destroy_retired`` runs the queue where no capture can be running: when a
thread takes a handle outside a capture, and from ``cupygraph.linalg.release_unused``. A graph
holds the handles it uses (``backends/holding.py``), so a queued handle serves no live graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends.capturing import stream_is_capturing
from ..backends.holding import hold, holding_active, scopes_open
from ..logs import logger

_retired: list[tuple[Callable[[], None], int, str]] = []


def thread_handle(handles: dict[int, Any], device_id: int, stream: Any, make: Callable[[], Any],
                  refusal: Callable[[], Exception]) -> Any:
    """The handle of ``handles`` (one thread's, of one library) for ``device_id``: made by ``make`` on first
    use, never while ``stream`` captures (``refusal()`` is raised then: making one allocates), where the
    queued handles are destroyed first; held by the graph being recorded, so none outlives its graphs."""
    handle = handles.get(device_id)
    if handle is None:
        if stream_is_capturing(stream):
            raise refusal()
        destroy_retired(stream)
        handle = handles[device_id] = make()
    elif _retired:
        destroy_retired(stream)
    if holding_active():
        hold(handle)
    return handle


def retire(destroy: Callable[[], None], device_id: int, library: str) -> None:
    """Queue ``destroy`` (a ``library`` handle's) for ``destroy_retired``. No lock: ``list.append`` is
    atomic, and a finaliser may run while any lock is held."""
    _retired.append((destroy, device_id, library))


def pending(library: str = "") -> int:
    """Handles queued and not destroyed yet (only ``library``'s, where one is named)."""
    return sum(1 for item in list(_retired) if not library or item[2] == library)


def destroy_retired(stream: Any = None) -> int:
    """Destroy the queued handles, unless a capture might be running; returns how many."""
    if not _retired or scopes_open() or (stream is not None and stream_is_capturing(stream)):
        return 0
    import cupy

    done = 0
    while True:
        try:
            destroy, device_id, _ = _retired.pop()  # atomic: two threads never take the same handle
        except IndexError:
            return done
        try:
            with cupy.cuda.Device(device_id):
                destroy()
            done += 1
        except Exception as err:  # one handle that cannot be destroyed must not keep the others
            logger.debug("cupygraph: a library handle could not be destroyed: %s: %s", type(err).__name__, err)
