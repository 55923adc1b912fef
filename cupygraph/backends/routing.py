"""Library calls routed while a function is recorded (issue 29): the switch and the ledger.

CuPy refuses cuBLAS, cuSOLVER, cuSPARSE and its legacy cuRAND generator on a capturing stream, so
``x @ W`` or ``cupy.linalg.solve`` made a capture fall back. While the warm-ups and the capture run
of one recording run in a thread, ``cupygraph/routes/`` sends those calls to cupygraph's
capture-safe implementations instead, and the host reference mirrors exactly what is routed
(``guards/host_guard.py`` lets those calls through). This module holds what both sides read:

* whether routing is on in this thread: the front door opens ``routing_policy`` around each
  recording with the config's ``route_library_calls`` (``CUPYGRAPH_ROUTE_LIBRARY_CALLS=0`` turns it
  off everywhere); a backend used without a front door routes nothing, on the GPU and the host alike;
* the ledger: what was routed (``note_routed``), which the recording keeps for statistics and logs;
* the rule both sides apply to a boolean-mask store of a scalar, ``y[mask] = v``, which CuPy
  shapes by reading the mask's count to the host and which runs as ``copyto(y, v, where=mask)``
  instead (``routes/cupy_mask_store.py``, ``guards/host_guard.py``): ``mask_store_where`` and
  ``stored_scalar``.

Neutral on purpose: backends, routes and the cache all import it; it imports nothing of cupygraph (NumPy
only, to convert a stored value as both libraries do).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy

__all__ = ["ENV_SWITCH", "MASK_STORE", "STORABLE_KINDS", "mask_store_where", "note_routed", "routing_enabled",
           "routing_policy", "stored_scalar"]

ENV_SWITCH = "CUPYGRAPH_ROUTE_LIBRARY_CALLS"
"""Set to 0 (false, no, off) to route nothing whatever the config says."""

_local = threading.local()


class _Policy:
    __slots__ = ("enabled", "routed")

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.routed: list[str] = []


@contextmanager
def routing_policy(enabled: bool) -> Iterator[list[str]]:
    """Routing on or off in this thread meanwhile; yields the ledger of what gets routed (labels
    such as ``"cupy.matmul (cublasGemmEx)"``, once per call made)."""
    previous: Optional[_Policy] = getattr(_local, "policy", None)
    policy = _local.policy = _Policy(enabled)
    try:
        yield policy.routed
    finally:
        _local.policy = previous


def routing_enabled() -> bool:
    """Whether library calls are routed in this thread now (False outside a front door's recording)."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    return policy is not None and policy.enabled


def note_routed(label: str) -> None:
    """A call was routed: counted in this thread's ledger."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is not None:
        policy.routed.append(label)


MASK_STORE = "mask store"
"""Label of a routed ``y[mask] = v``, followed by the user's line (the GPU and the host note the same)."""
STORABLE_KINDS = frozenset("biufc")
"""dtype kinds of the arrays and values a routed mask store takes (numbers and booleans)."""


def mask_store_where(target_shape: tuple[int, ...], mask_shape: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """The shape the mask of ``y[mask] = v`` takes as ``copyto``'s ``where`` over ``y``, or None when it
    is no mask the route takes: it must be of ``y``'s shape or of its leading axes (at least one), and is
    broadcast over the trailing ones, as NumPy and CuPy select whole sub-arrays there."""
    leading = len(mask_shape)
    if leading == 0 or tuple(mask_shape) != tuple(target_shape[:leading]):
        return None
    return (*mask_shape, *(1,) * (len(target_shape) - leading))


def stored_scalar(value: Any, dtype: Any) -> Optional[Any]:
    """``value`` of ``y[mask] = value`` converted to ``y``'s ``dtype`` as NumPy's store and CuPy's
    (``numpy.array(value, dtype=dtype)``) convert it, when it is a Python number, a NumPy scalar or a
    0-d NumPy array of numbers; None for any other value, or one they would not convert (out of
    range): the store is then left to the library, whose error is the user's."""
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        if value.ndim != 0 or value.dtype.kind not in STORABLE_KINDS:
            return None
    elif not isinstance(value, (bool, int, float, complex)):
        return None
    try:
        return numpy.array(value, dtype=dtype)[()]
    except (TypeError, ValueError, OverflowError):
        return None
