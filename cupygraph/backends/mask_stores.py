"""A boolean-mask store of a scalar, ``y[mask] = v``, routed as ``copyto(y, v, where=mask)`` (issue 29).

CuPy shapes ``y[mask] = v`` by reading the mask's count to the host, which a capture refuses; with
routing on (``routing.py``) it runs as ``copyto(y, v, where=mask)`` instead, on the GPU
(``routes/cupy_mask_store.py``) and on the host reference (``guards/host_guard.py``) alike. This
module holds the rule both apply: which masks and values are rewritten, and how a value is converted.

Neutral on purpose: it imports nothing of cupygraph (NumPy only, to convert a stored value as both
libraries do).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

__all__ = ["MASK_STORE", "STORABLE_KINDS", "mask_store_where", "stored_scalar"]


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
