"""The optional compiled part of cupygraph (``_replay.c``), or its stand-ins where it was not built.

``setup.py`` builds it where a C compiler is found; without it ``COMPILED`` is False, every call
takes the Python path (same results, more host time) and nothing else changes. It needs neither
CuPy nor a GPU to import: the jitted function's class derives from ``FastFunction`` everywhere, and
entries count into ``ReplayCounts`` and families into ``FamilyState`` whichever is in use.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Optional


class PythonFastFunction:
    """``FastFunction`` without the compiler: every call goes to the Python path, ``miss``."""

    record: Any = None
    miss: Optional[Callable[..., Any]] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        miss = self.miss
        if miss is None:
            raise TypeError("FastFunction: no Python path (miss) was given")
        return miss(*args, **kwargs)


class PythonReplayCounts:
    """``ReplayCounts`` without the compiler: one entry's counts, read by the statistics and eviction."""

    __slots__ = ("bound_calls", "hits", "last_bank", "last_used", "replays")

    def __init__(self) -> None:
        self.replays = self.bound_calls = self.last_used = self.last_bank = 0
        self.hits: dict[int, int] = {}


class PythonFamilyState:
    """``FamilyState`` without the compiler: a family's generation (no record reads it here)."""

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0

    def bump(self) -> None:
        self.generation += 1


try:
    from ._replay import (
        MAX_ARGUMENTS,
        MAX_BANKS,
        MAX_POSITIONS,
        MAX_SLOTS,
        FamilyState,
        FastFunction,
        Record,
        ReplayCounts,
        references,
        tick,
    )
except ImportError:  # built without a C compiler
    FastFunction = PythonFastFunction  # type: ignore[assignment,misc]
    ReplayCounts = PythonReplayCounts  # type: ignore[assignment,misc]
    FamilyState = PythonFamilyState  # type: ignore[assignment,misc]
    Record = None  # type: ignore[assignment,misc]
    references = None  # type: ignore[assignment]
    tick = itertools.count(1).__next__
    MAX_ARGUMENTS = MAX_BANKS = MAX_POSITIONS = MAX_SLOTS = 0

COMPILED = Record is not None
"""Whether the compiled replay is built and used."""

__all__ = ["COMPILED", "MAX_ARGUMENTS", "MAX_BANKS", "MAX_POSITIONS", "MAX_SLOTS", "FamilyState", "FastFunction",
           "PythonFastFunction", "Record", "ReplayCounts", "references", "tick"]
