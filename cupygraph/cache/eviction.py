"""Which graph leaves the cache first: one small strategy object per ``eviction`` policy.

Every policy protects hot graphs the same way: entries with at least ``min_replays_to_keep``
replays go only when no colder entry is left. The policies differ only in how they rank the
rest, so adding one is adding a ``rank``.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable
from typing import Any, Optional, Protocol


class Evictable(Protocol):
    """What eviction reads of an entry: both are stamped by every launch, never by the cache."""

    @property
    def replay_count(self) -> int: ...

    @property
    def last_used(self) -> float:  # an int tick (entry.use_tick) or a clock reading: only compared
        ...


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


class HighestBenefit(EvictionPolicy):
    """The graph whose keeping is worth least goes first, from measured times (``KeyTiming``).

    Keeping a graph is worth ``calls * ((eager - replay) + capture)`` seconds, where ``calls`` is
    its expected replays in the next ``horizon_s`` seconds (``horizon_s * replays / (age +
    horizon_s)``: a graph captured a moment ago is not trusted with a high rate from one call):
    each call saves eager minus replay time, and a graph evicted while its key is still called is
    captured again (warm-up, recording, instantiation), in a cache under pressure once per
    eviction. Under a memory budget (``per_byte``) the value is divided by the bytes the graph
    holds, so one large graph does not crowd out several small ones worth more together.
    The saving counts only where both times were measured: the eager time (a warm-up ran) and the
    replay time (sampled on the device with ``replay_timing_every``, or the host launch time under
    ``time_replays``); otherwise only the re-capture cost ranks the graph.
    """

    name = "benefit"

    def __init__(self, min_replays_to_keep: int = 0, *, per_byte: bool = False, horizon_s: float = 1.0,
                 clock: Callable[[], float] = time.time):
        super().__init__(min_replays_to_keep)
        self.per_byte, self.horizon_s, self.clock = per_byte, horizon_s, clock

    def value(self, entry: Any) -> float:
        """Seconds that keeping ``entry`` is expected to save over the horizon."""
        age = max(self.clock() - entry.captured_at, 0.0)
        calls = self.horizon_s * entry.replay_count / (age + self.horizon_s)
        timing = entry.timing
        capture = float(entry.capture_time)
        eager = timing.eager_s() if timing is not None else None
        replay = timing.replay_s() if timing is not None else None
        if replay is None and entry.total_replay_s:  # host launch times, kept only under time_replays
            replay = entry.total_replay_s / entry.replay_count
        # A saving needs both times measured: an unmeasured replay is not taken as free.
        saving = max(0.0, eager - replay) if eager is not None and replay is not None else 0.0
        return float(calls * (saving + capture))

    def rank(self, entry: Any) -> Any:
        value = self.value(entry)
        return (value / max(int(entry.nbytes), 1) if self.per_byte else value, entry.last_used)


POLICIES: dict[str, type[EvictionPolicy]] = {
    cls.name: cls for cls in (LeastRecentlyUsed, LeastFrequentlyUsed, HighestBenefit)
}


def eviction_policy(name: str, min_replays_to_keep: int = 0, *, per_byte: bool = False) -> EvictionPolicy:
    """The policy the config's ``eviction`` field names (``per_byte``: a memory budget applies)."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; valid policies: {', '.join(POLICIES)}") from None
    if cls is HighestBenefit:
        return HighestBenefit(min_replays_to_keep, per_byte=per_byte)
    return cls(min_replays_to_keep)
