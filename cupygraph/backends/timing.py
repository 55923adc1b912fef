"""Timing samples that never wait: started and stopped around GPU or host work, read when done.

The eviction policy ``benefit`` weighs measured times (``cache/instruments/timing.py``): a graph's replay,
sampled every Nth replay, and the function's eager run, from the last warm-up before capture.
A sample is read only once its work has finished (``seconds()`` is None until then), so
sampling adds no synchronisation to the caller's stream.
"""

from __future__ import annotations

import time
from typing import Optional, Protocol


class Sample(Protocol):
    def stop(self) -> None:
        """Mark the end of the timed work (after it was enqueued)."""

    def seconds(self) -> Optional[float]:
        """The elapsed time once the timed work has finished, else None (never waits)."""


class HostSample:
    """Wall-clock time of work that runs synchronously on the host (the NumPy backend)."""

    __slots__ = ("_end", "_start")

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._end: Optional[float] = None

    def stop(self) -> None:
        self._end = time.perf_counter()

    def seconds(self) -> Optional[float]:
        return None if self._end is None else self._end - self._start
