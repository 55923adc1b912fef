"""Debug-mode detection of stale view outputs (``output_mode="view"`` with ``debug=True``).

A view output points into a graph family's static buffers; the next replay or capture of any
graph of the same function rewrites them. In debug mode every array a call returns is a fresh
view object, registered with the family's write count (``ViewEpoch``) at the time it was
returned. ``check_fresh(view)`` raises ``StaleOutputError`` when the family wrote its buffers
since, and a debug-mode graphed function checks its own arguments the same way.

What is caught: the arrays a debug-mode call returned (each leaf of its output structure), read
through ``check_fresh`` or passed back into any debug-mode graphed function, after a later call
of the same function replayed or captured a graph, or after its graphs were evicted or cleared.

What is not caught: arrays derived from a returned view (slices, reshapes, ``.T``) are new objects
this module never saw; reads through plain NumPy/CuPy operations (they cannot be intercepted);
functions without ``debug=True``, including other functions sharing the registry; and on the GPU,
kernels the caller enqueued before the next replay on another stream without ordering (a race,
not a stale read on the host side). Copy-mode outputs are owned by the caller and never stale.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ...errors import StaleOutputError
from ...pytree import flatten, unflatten


class ViewEpoch:
    """How many times one graph family's static buffers were (re)written: replays, captures, clears."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> None:
        self.value += 1


class _Issued:
    __slots__ = ("epoch", "label", "ref", "written")

    def __init__(self, ref: Any, epoch: ViewEpoch, written: int, label: str):
        self.ref, self.epoch, self.written, self.label = ref, epoch, written, label


# id(view) -> what it was issued with. Entries leave when their view is collected (weakref
# callback), so an id is never mistaken for a later object's. Array types that refuse weak
# references are held strongly in a bounded table instead (the oldest are forgotten: unknown,
# never reported stale).
_issued: dict[int, _Issued] = {}
_strong: OrderedDict[int, Any] = OrderedDict()
_STRONG_LIMIT = 4096
_lock = threading.Lock()


def _forget(key: int, ref: Any) -> None:
    with _lock:
        record = _issued.get(key)
        if record is not None and record.ref is ref:
            del _issued[key]


def issue(outputs: Any, epoch: ViewEpoch, is_array: Callable[[Any], bool], name: str) -> Any:
    """``outputs`` with each array leaf replaced by a new view registered at ``epoch``'s value."""
    leaves, spec = flatten(outputs, is_array)
    fresh = []
    for i, leaf in enumerate(leaves):
        if is_array(leaf):
            leaf = leaf.view()
            key = id(leaf)
            label = f"output {i} of {name}()" if len(leaves) > 1 else f"the output of {name}()"
            ref: Optional[weakref.ref[Any]]
            try:
                ref = weakref.ref(leaf, functools.partial(_forget, key))
            except TypeError:
                ref = None
            with _lock:
                _issued[key] = _Issued(ref, epoch, epoch.value, label)
                if ref is None:
                    _strong[key] = leaf
                    while len(_strong) > _STRONG_LIMIT:
                        old, _ = _strong.popitem(last=False)
                        _issued.pop(old, None)
        fresh.append(leaf)
    return unflatten(spec, fresh)


def stale_reason(array: Any) -> Optional[str]:
    """Why ``array`` is a stale view, or None (fresh, a copy, or never returned in debug mode)."""
    with _lock:
        record = _issued.get(id(array))
    if record is None:
        return None
    if record.ref is not None and record.ref() is not array:
        return None
    if record.epoch.value == record.written:
        return None
    writes = record.epoch.value - record.written
    return (
        f"{record.label} is a view into the graph's static buffers, and they were rewritten "
        f"{writes} time{'s' if writes != 1 else ''} since it was returned (a later call of the function "
        f"replayed or captured a graph). View outputs are valid until the next call: copy what you "
        f"keep (array.copy(), or output_mode='copy')"
    )


def check_fresh(*arrays: Any) -> None:
    """Raise ``StaleOutputError`` if any of ``arrays`` is a view output whose graph rewrote it since.

    Only arrays returned by a ``debug=True``, ``output_mode="view"`` call are tracked (see the
    module docstring for what is and is not caught); anything else passes.
    """
    for array in arrays:
        reason = stale_reason(array)
        if reason is not None:
            raise StaleOutputError(reason)


def check_arguments_fresh(args: Sequence[Any], name: str) -> None:
    """Debug mode: an argument that is a view output rewritten since it was returned is an error naming it."""
    for i, arg in enumerate(args):
        reason = stale_reason(arg)
        if reason is not None:
            raise StaleOutputError(f"argument {i} of {name}(): {reason}")
