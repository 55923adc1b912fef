"""The jitted functions alive in this process, and who wants to hear of new ones (the pytest plugin,
the CLI, ``cupygraph.script``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jit import GraphedFunction

_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_CREATION_HOOKS: list[Callable[[Any], None]] = []


def live_functions() -> list[GraphedFunction]:
    """Every jitted function alive in this process (for inspection, the pytest plugin and the CLI)."""
    return list(_LIVE)


def on_creation(hook: Callable[[GraphedFunction], None]) -> Callable[[], None]:
    """Call ``hook(fn)`` for every jitted function created from now on; returns an unsubscribe."""
    _CREATION_HOOKS.append(hook)
    return lambda: _CREATION_HOOKS.remove(hook)


def announce(fn: GraphedFunction) -> None:
    """``fn`` was just made: keep it (weakly) among the live ones and tell every hook."""
    _LIVE.add(fn)
    for hook in list(_CREATION_HOOKS):
        hook(fn)
