"""Readers for the values a ``CUDAGraphConfig`` holds: integers, size lists, byte sizes, choices, numbers.

Each is a pydantic before-validator (or used by one): it returns a plain Python value or raises
``ValueError`` with a message that says what is allowed; the config adds the field and the file.
NumPy integers count as integers (``capture_sizes=np.arange(1, 5)``); bools never do, and
neither do floats or strings that merely look like integers (``2.0``, ``1e20``, ``"8"``): in a
config they are mistakes, not values to coerce. Likewise a switch is ``true`` or ``false`` (a NumPy
bool too), never ``"true"``, ``"yes"`` or ``1``. Every integer has an upper bound (``MAX_INT``).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Annotated, Any, Optional

from pydantic import Field, StrictInt

from .modes import short_repr

MAX_INT = 2**31 - 1
"""Largest size or count a config field holds. CUDA grid dimensions and cuBLAS/cuSOLVER matrix
dimensions are 32-bit ints, so no kernel could take a larger batch; a larger count is a typo."""

MAX_BYTES = 2**63 - 1
"""Largest memory budget: byte counts are 64-bit everywhere they are compared."""


def integral_to_int(value: Any) -> Any:
    """A NumPy (or other ``numbers.Integral``) integer as a Python int; anything else unchanged,
    for the strict int check to judge (bools, NumPy bools, floats and strings fail it)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    return value


# Strict: a YAML "8" or a bool is a mistake in a size, not something to coerce. NumPy integers are
# made Python ints by a before-validator on the field (``integral_to_int``), not in this type, so the
# JSON schema keeps its "minimum".
PositiveInt = Annotated[StrictInt, Field(ge=1, le=MAX_INT)]


def is_bool(value: Any) -> bool:
    """A Python or NumPy bool (``numpy.bool_``, named ``numpy.bool`` since NumPy 2)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def as_bool(value: Any) -> bool:
    """A switch: a Python or NumPy bool as a Python bool; anything else (``"true"``, ``1``) is refused."""
    if is_bool(value):
        return bool(value)
    raise ValueError("expected true or false (a bool, unquoted in a config file)")


def as_size_list(value: Any) -> Any:
    """A list, tuple, range or 1-D NumPy array of sizes as a tuple (items checked by the field)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple, range)):
        return tuple(integral_to_int(item) for item in value)
    ndim = getattr(value, "ndim", None)
    if ndim == 1 and callable(getattr(value, "tolist", None)):
        return tuple(value.tolist())
    kind = f"a {ndim}-D array" if isinstance(ndim, int) else type(value).__name__
    raise ValueError(f"expected a list of positive integers, got {kind}")


def as_number(value: Any) -> Any:
    """``pad_value``: a Python or NumPy int or float (not a bool), as a Python int or float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"pad_value must be a number, got {short_repr(value)}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def choice(name: str, choices: tuple[str, ...]) -> Callable[[Any], Any]:
    """A before-validator that accepts the choices in any case and lists them on error."""

    def check(value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ValueError(f"{name} must be one of {', '.join(choices)}")

    return check


_BYTE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_BYTE_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_UNIT_NAMES = ", ".join(u if u == "b" else u[0].upper() + u[1:-1] + "B" for u in _BYTE_UNITS)


def parse_byte_size(value: Any) -> Optional[int]:
    """``None``, a positive int of bytes, or a string such as ``"2GiB"`` / ``"512 MB"`` / ``"1.5GiB"``.

    A string must come to a whole number of bytes: ``"1.5GiB"`` is fine, ``"1.9 B"`` is refused
    rather than rounded, since a budget that silently differs from the one written is a surprise.
    """
    if value is None:
        return None
    if is_bool(value):
        raise ValueError("expected a byte size such as 2GiB or an integer number of bytes, not a bool")
    if isinstance(value, numbers.Integral):
        if value <= 0:
            raise ValueError(f"a byte size must be positive, got {value}")
        return _within_bytes(int(value), value)
    if isinstance(value, str):
        match = _BYTE_SIZE.match(value)
        unit = match.group(2).lower() if match else ""
        if match and (unit or "b") in _BYTE_UNITS:
            exact = Fraction(match.group(1)) * _BYTE_UNITS[unit or "b"]
            if exact.denominator != 1:
                raise ValueError(
                    f"cannot use {short_repr(value)} as a byte size: it is {float(exact):g} bytes, not a "
                    f"whole number; write whole bytes (or a size in a larger unit, such as 1.5GiB)"
                )
            if exact > 0:
                return _within_bytes(int(exact), value)
        raise ValueError(
            f"cannot read {short_repr(value)} as a byte size; write a positive number with one of the units "
            f"{_UNIT_NAMES} (for example 2GiB or 512MB), or an integer number of bytes"
        )
    raise ValueError(f"expected a byte size such as 2GiB or an integer number of bytes, got {type(value).__name__}")


def _within_bytes(size: int, written: Any) -> int:
    if size > MAX_BYTES:
        raise ValueError(f"{short_repr(written)} is more than {MAX_BYTES} bytes, the most a byte size may be")
    return size


def pad_value_problem(pad_value: Any, dtype: Any) -> Optional[str]:
    """Why ``pad_value`` cannot fill padding rows of an array of ``dtype`` as written; None when it can.

    NumPy and CuPy would convert silently: 2.7 becomes 2 in int32, -1 wraps in uint8, 1e300 becomes
    inf in float16, NaN in an int array is an error only at run time. The graph cache asks this before
    it captures a key (``cache.padding.check_pad_value``), so the config's value and the input's dtype
    are checked together, once.
    """
    import numpy as np

    dt = np.dtype(dtype)
    shown = short_repr(pad_value)
    if dt.kind == "b":
        return None if pad_value in (0, 1) else f"pad_value={shown} is not a bool (0 or 1) for {dt} inputs"
    if dt.kind in "iu":
        if isinstance(pad_value, float) and not math.isfinite(pad_value):
            return f"pad_value={shown} is not finite, so it cannot pad {dt} inputs"
        if isinstance(pad_value, float) and not pad_value.is_integer():
            return (f"pad_value={shown} is not a whole number, so it cannot pad {dt} inputs "
                    f"(it would become {int(pad_value)})")
        info = np.iinfo(dt)
        if not info.min <= pad_value <= info.max:
            return f"pad_value={shown} is outside the range of {dt} ({info.min}..{info.max})"
        return None
    if dt.kind in "fc":  # a complex number's parts are floats of half its size
        largest = float(np.finfo(dt).max)
        if math.isfinite(pad_value) and abs(pad_value) > largest:
            return f"pad_value={shown} overflows {dt} (largest {largest:g}): it would become inf"
        return None
    return f"inputs of dtype {dt} cannot be padded with a number (pad_value={shown})"
