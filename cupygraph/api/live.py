"""The jitted functions alive in this process, and who wants to hear of new ones (the pytest plugin,
the CLI, ``cupygraph.script``).

Generic in the function type, so this module needs nothing of ``jit``, which announces each
function it makes here (``api/jit.py``: ``live_functions``, ``on_creation``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LiveFunctions(Generic[T]):
    """The functions announced and still alive (held weakly), and the hooks that hear of new ones."""

    def __init__(self) -> None:
        self._live: weakref.WeakSet[T] = weakref.WeakSet()
        self._hooks: list[Callable[[T], None]] = []

    def alive(self) -> list[T]:
        """Every jitted function alive in this process (for inspection, the pytest plugin and the CLI)."""
        return list(self._live)

    def on_creation(self, hook: Callable[[T], None]) -> Callable[[], None]:
        """Call ``hook(fn)`` for every jitted function created from now on; returns an unsubscribe."""
        self._hooks.append(hook)
        return lambda: self._hooks.remove(hook)

    def announce(self, fn: T) -> None:
        """``fn`` was just made: keep it (weakly) among the live ones and tell every hook."""
        self._live.add(fn)
        for hook in list(self._hooks):
            hook(fn)
