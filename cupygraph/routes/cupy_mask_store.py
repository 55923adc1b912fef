"""``y[mask] = v`` rewritten into ``cupy.copyto(y, v, where=mask)`` while a function is recorded (issue 29).

CuPy's boolean-mask store counts the mask's True elements on the host to shape the values it
scatters (``_prepare_mask_indexing_single`` reads the last element of a scan of the mask), and a
capturing stream refuses that device-to-host read, so ``y[y < 0] = 0`` made a function fall back.
A store of one value needs no count: every selected element gets that value, which
``copyto(y, v, where=mask)`` writes with one elementwise kernel, the same values CuPy's scatter
writes (``v`` is converted to ``y``'s dtype as CuPy converts it).

While a recording runs in a thread, ``cupy.ndarray.__setitem__`` is replaced (``uploads.Interception``:
``cupy.ndarray`` is a Python subclass of the compiled ``_ndarray_base``; every other thread keeps
CuPy's own). Only this exact pattern is rewritten, in the warm-ups and the capture run alike:

* ``y``: a ``cupy.ndarray`` of numbers or booleans;
* the index: one boolean ``cupy.ndarray`` on ``y``'s device, of ``y``'s shape or of its leading axes
  (broadcast over the trailing ones, as the store selects whole sub-arrays there);
* ``v``: a Python number, a NumPy scalar, a 0-d NumPy array (``backends/routing.stored_scalar``
  converts them, as CuPy's ``core.array(v, dtype=y.dtype)`` does), or a 0-d ``cupy.ndarray`` on
  ``y``'s device (cast with ``astype``, as CuPy casts it).

Everything else (a tuple index, an array of values, a value CuPy would not convert) is CuPy's own
``__setitem__``, and fails the capture as before where it reads to the host. The host reference
rewrites the same pattern (``backends/guards/host_guard.py``) and notes the same label.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from ..backends.guards.uploads import Interception
from ..backends.mask_stores import MASK_STORE, STORABLE_KINDS, mask_store_where, stored_scalar
from ..backends.routing import note_routed, routing_enabled
from ..frames import location_in_stack

__all__ = ["routed_mask_stores"]


def _targets() -> list[tuple[Any, str, str]]:
    try:
        import cupy
    except ImportError:  # a stand-in for CuPy (the test suite's fakes): nothing to route
        return []
    return [(cupy.ndarray, "__setitem__", "cupy.ndarray.__setitem__")]


_interception = Interception(_targets)


def _device_scalar(target: Any, value: Any) -> Optional[Any]:
    """A 0-d device ``value`` cast to ``target``'s dtype on the device (CuPy's ``astype``), or None."""
    if value.ndim != 0 or value.dtype.kind not in STORABLE_KINDS or value.data.device_id != target.data.device_id:
        return None
    return value.astype(target.dtype, copy=False)


def _rewritten(target: Any, index: Any, value: Any) -> Optional[tuple[Any, Any]]:
    """``(where, value)`` for ``copyto`` when ``target[index] = value`` is the pattern routed, else None."""
    import cupy

    if not isinstance(target, cupy.ndarray) or not isinstance(index, cupy.ndarray):
        return None
    if index.dtype != bool or target.dtype.kind not in STORABLE_KINDS or index.data.device_id != target.data.device_id:
        return None
    where = mask_store_where(target.shape, index.shape)
    if where is None:
        return None
    fill = _device_scalar(target, value) if isinstance(value, cupy.ndarray) else stored_scalar(value, target.dtype)
    if fill is None:
        return None
    return index.reshape(where), fill


def _store(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not kwargs and len(args) == 3 and routing_enabled():
        plan = _rewritten(*args)
        if plan is not None:
            import cupy

            where, fill = plan
            cupy.copyto(args[0], fill, where=where)
            # Frames: location_in_stack <- _store <- the replacement <- the user's line (or a library's)
            note_routed(f"{MASK_STORE}{location_in_stack(sys._getframe(1))}")  # the host notes the same label
            return None
    return original(*args, **kwargs)


@contextmanager
def routed_mask_stores(fn: Any = None) -> Iterator[None]:
    """Boolean-mask stores of one value in this thread run as ``copyto(..., where=mask)`` meanwhile."""
    with _interception.active(_store, fn):
        yield
