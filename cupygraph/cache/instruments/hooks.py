"""What a graph cache adds to its entries when asked: replay timing and NVTX ranges.

Decided once per cache from the config (``time_replays``, ``replay_timing_every``, ``nvtx`` /
``CUPYGRAPH_NVTX``). With all off an entry gets no launch hooks and every call path stays as it was;
with one on, each entry captured from then on gets its launch hooks once (``CUDAGraphEntry.set_hooks``),
and a PIECEWISE recording a hook around each graph break (``Recording.set_break_hook``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

from ...backends.base import Backend
from ...config.model import CUDAGraphConfig
from ..entry import CUDAGraphEntry, LaunchHook
from ..key import GraphKey
from .ranges import RangeProvider, range_provider
from .timing import KeyTiming


def _host_timed(entry: CUDAGraphEntry, launch: Callable[[], None]) -> Callable[[], None]:
    """``launch`` that adds its host time to ``entry.total_replay_s`` (``time_replays``): two clock reads."""
    def timed_launch() -> None:
        start = time.perf_counter()
        launch()
        entry.total_replay_s += time.perf_counter() - start

    return timed_launch


def key_label(key: GraphKey) -> str:
    desc = key.descriptor
    label = f"{key.mode.name} size={desc.num_tokens}"
    return label if desc.seq_len is None else f"{label} seq_len={desc.seq_len}"


class Instruments:
    """Replay timing and NVTX ranges for one graph cache, on or off for its whole life."""

    def __init__(self, config: CUDAGraphConfig, backend: Backend):
        self.timing_every = config.replay_timing_every
        self.time_replays = config.time_replays
        self.ranges: Optional[RangeProvider] = range_provider(config.nvtx)
        self._start_sample = backend.start_sample

    def capturing(self, name: str, key: GraphKey) -> AbstractContextManager[Any]:
        """A range around a capture (warm-ups, recording, instantiation), when ranges are on."""
        if self.ranges is None:
            return nullcontext()
        return _range(self.ranges, f"cupygraph capture {name} {key_label(key)}")

    def eager(self, name: str, reason: str) -> AbstractContextManager[Any]:
        """A range around a call that runs eagerly (``reason``: its fallback code), when ranges are on."""
        if self.ranges is None:
            return nullcontext()
        return _range(self.ranges, f"cupygraph eager {name}: {reason}")

    def running_as_it_is(self, name: str, key: GraphKey, why: str) -> AbstractContextManager[Any]:
        """A range around the function run as it is for a call that captures its key or checks its padding
        (``cache/first_call.py``; ``why`` says which), when ranges are on."""
        if self.ranges is None:
            return nullcontext()
        return _range(self.ranges, f"cupygraph {why} {name} {key_label(key)}")

    def install(self, entry: CUDAGraphEntry, name: str) -> None:
        """Give ``entry`` its measured times, and the launch hooks this cache's config asks for."""
        timing = entry.timing = KeyTiming(entry.recording.warmup_sample)
        hooks: list[LaunchHook] = []
        if self.time_replays:
            hooks.append(_host_timed)
        if self.timing_every:
            every, start = self.timing_every, self._start_sample
            hooks.append(lambda entry, launch: timing.sampled(launch, start, every))
        ranges = self.ranges
        if ranges is not None:
            label = f"{name} {key_label(entry.key)}"
            hooks.append(lambda entry, launch: _ranged(launch, ranges, f"cupygraph replay {label}"))
            entry.recording.set_break_hook(lambda op, launch: _ranged(
                launch, ranges, f"cupygraph graph break {getattr(op, '__name__', type(op).__name__)} in {label}"))
        if hooks:
            entry.set_hooks(hooks)


@contextmanager
def _range(ranges: RangeProvider, message: str) -> Iterator[None]:
    ranges.push(message)
    try:
        yield
    finally:
        ranges.pop()


def _ranged(launch: Callable[[], None], ranges: RangeProvider, message: str) -> Callable[[], None]:
    push, pop = ranges.push, ranges.pop

    def ranged_launch() -> None:
        push(message)
        try:
            launch()
        finally:
            pop()

    return ranged_launch
