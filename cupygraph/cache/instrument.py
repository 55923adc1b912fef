"""What a graph cache adds to its entries when asked: replay timing and NVTX ranges.

Decided once per cache from the config (``time_replays``, ``replay_timing_every``, ``nvtx`` /
``CUPYGRAPH_NVTX``).
With both off an entry keeps its class's ``launch`` and every call path stays as it was; with
one on, per-instance wrappers are installed on the entries captured from then on (the same
per-instance choice ``CUDAGraphEntry`` makes for functions that write into their arguments).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

from ..backends.base import Backend
from ..config.model import CUDAGraphConfig
from .entry import CUDAGraphEntry
from .key import GraphKey
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

    def running_as_it_is(self, name: str, key: GraphKey, why: str) -> AbstractContextManager[Any]:
        """A range around the function run as it is for a call that captures its key or checks its padding
        (``api/first_call.py``; ``why`` says which), when ranges are on."""
        if self.ranges is None:
            return nullcontext()
        return _range(self.ranges, f"cupygraph {why} {name} {key_label(key)}")

    def install(self, entry: CUDAGraphEntry, name: str) -> None:
        """Give ``entry`` its measured times, and the wrappers this cache's config asks for."""
        entry.timing = KeyTiming(entry.recording.warmup_sample)
        if self.time_replays:
            entry.launch = _host_timed(entry, entry.launch)  # type: ignore[method-assign]
        if self.timing_every:
            entry.launch = entry.timing.sampled(entry.launch, self._start_sample,  # type: ignore[method-assign]
                                                self.timing_every)
        ranges = self.ranges
        if ranges is None:
            return
        label = f"{name} {key_label(entry.key)}"
        entry.launch = _ranged(entry.launch, ranges, f"cupygraph replay {label}")  # type: ignore[method-assign]
        for step in getattr(entry.recording, "steps", ()):
            op = getattr(step, "fn", None)
            if op is not None:  # an eager step between graph pieces: a graph break
                op_name = getattr(op, "__name__", type(op).__name__)
                step.launch = _ranged(step.launch, ranges, f"cupygraph graph break {op_name} in {label}")

    def wrap_fallback(self, run_eagerly: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``run_eagerly(args, kwargs, why)`` inside a range naming the reason (ranges on), else itself."""
        ranges = self.ranges
        if ranges is None:
            return run_eagerly

        def ranged_fallback(args: Any, kwargs: Any, why: Any) -> Any:
            ranges.push(f"cupygraph eager {name}: {why.reason.value}")
            try:
                return run_eagerly(args, kwargs, why)
            finally:
                ranges.pop()

        return ranged_fallback


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
