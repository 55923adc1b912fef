"""Python numbers a function reads without taking them as arguments: baked into its graph at capture.

A graph replays what its capture recorded: ``x * self.scale``, ``x * SCALE`` or ``if self.training:``
keep the number (or flag) the capture read, as ``jax.jit`` keeps what it traced, while the plain
function reads the current one. The host reference re-runs the function on each replay, so there the
new value shows: one more reason to rely on neither. Under ``debug=True`` a replay warns
(``BakedNumberWarning``, once per name and value) when such a number changed since capture, naming it;
pass it as a static argument instead (a new value is then a new key), or ``clear()`` the function after
changing it. Found where ``foreign.find_arrays`` finds arrays: closure variables, globals the code names,
defaults, attributes of ``self`` and of objects passed as static arguments, bounded the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from .foreign import MISSING, FoundArray, find_arrays

__all__ = ["BakedNumber", "BakedNumberWarning", "find_baked_numbers", "warn_changed"]


class BakedNumberWarning(UserWarning):
    """Debug mode: a Python number a graph was captured with has changed since; replays keep the old one."""


def _is_number(value: Any) -> bool:
    return type(value) in (bool, int, float, complex)


def _same(a: Any, b: Any) -> bool:
    # repr tells apart what == does not and traces otherwise (1 and True, 0.0 and -0.0), and keeps NaN equal.
    return type(a) is type(b) and repr(a) == repr(b)


class BakedNumber:
    """Where a number was found and the value the capture read there."""

    __slots__ = ("found", "warned")

    def __init__(self, found: FoundArray):
        self.found = found
        self.warned: set[str] = set()

    def changed_to(self) -> Any:
        """The value bound there now where it differs from the capture's, else ``MISSING``."""
        current = self.found.watch.current()
        return MISSING if current is MISSING or _same(current, self.found.array) else current


def find_baked_numbers(fn: Any, args: Sequence[Any]) -> list[BakedNumber]:
    """The numbers ``fn`` reads besides its arguments, as they are now (at capture)."""
    return [BakedNumber(found) for found in find_arrays(fn, _is_number, args=args)]


def warn_changed(baked: Sequence[BakedNumber], fn_name: str) -> None:
    """Debug mode, before a replay: one ``BakedNumberWarning`` per number changed since capture (and value)."""
    for number in baked:
        now = number.changed_to()
        if now is MISSING or repr(now) in number.warned:
            continue
        number.warned.add(repr(now))
        warnings.warn(
            f"{fn_name}(): {number.found.name} was {number.found.array!r} when its graph was captured and is "
            f"{now!r} now: a GPU graph keeps what its capture read, so its replays still use "
            f"{number.found.array!r} (the host reference re-runs the function and reads {now!r}). Pass it as a "
            "static argument (static_argnums: a new value is a new key), or clear() the function after changing "
            "it", BakedNumberWarning, stacklevel=4)
