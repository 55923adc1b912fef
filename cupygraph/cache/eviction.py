"""Which graph leaves the cache first: one small strategy object per ``eviction`` policy.

Every policy protects hot graphs the same way: entries with at least ``min_replays_to_keep``
replays go only when no colder entry is left. The policies differ only in how they rank the
rest, so adding one is adding a ``rank``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Optional, Protocol


class Evictable(Protocol):
    """What eviction reads of an entry: both are stamped by every launch, never by the cache."""

    replay_count: int
    last_used: float  # an int tick (entry.use_tick) or a clock reading: only compared


class EvictionPolicy(abc.ABC):
    """Chooses the next victim among a cache's entries."""

    name: str
    """The config's ``eviction`` value that selects this policy."""

    def __init__(self, min_replays_to_keep: int = 0):
        self.min_replays_to_keep = min_replays_to_keep

    @abc.abstractmethod
    def rank(self, entry: Evictable) -> Any:
        """Sort key: the entry with the smallest rank is evicted first."""

    def victim(self, entries: Iterable[Evictable], exclude: Optional[Evictable] = None) -> Optional[Any]:
        """The entry to evict next (never ``exclude``, the one being added), or None when none is left."""
        candidates = [e for e in entries if e is not exclude]
        if not candidates:
            return None
        keep = self.min_replays_to_keep
        if keep > 0:
            candidates = [e for e in candidates if e.replay_count < keep] or candidates
        return min(candidates, key=self.rank)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(min_replays_to_keep={self.min_replays_to_keep})"


class LeastRecentlyUsed(EvictionPolicy):
    name = "lru"

    def rank(self, entry: Evictable) -> Any:
        return entry.last_used


class LeastFrequentlyUsed(EvictionPolicy):
    """Fewest replays first; among equals the least recently used."""

    name = "lfu"

    def rank(self, entry: Evictable) -> Any:
        return (entry.replay_count, entry.last_used)


POLICIES: dict[str, type[EvictionPolicy]] = {cls.name: cls for cls in (LeastRecentlyUsed, LeastFrequentlyUsed)}


def eviction_policy(name: str, min_replays_to_keep: int = 0) -> EvictionPolicy:
    """The policy the config's ``eviction`` field names."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; valid policies: {', '.join(POLICIES)}") from None
    return cls(min_replays_to_keep)
