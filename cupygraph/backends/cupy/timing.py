"""CUDA-event timing samples on the current stream (``backends/timing.py``'s ``Sample``).

Two events bracket the work on the caller's stream; ``seconds()`` asks whether the second one has
completed (``cudaEventQuery``) and only then reads the elapsed time, so the host never blocks.
"""

from __future__ import annotations

from typing import Optional

import cupy


class EventSample:
    __slots__ = ("_end", "_seconds", "_start")

    def __init__(self) -> None:
        self._start = cupy.cuda.Event()
        self._start.record()
        self._end: Optional[cupy.cuda.Event] = None
        self._seconds: Optional[float] = None

    def stop(self) -> None:
        self._end = cupy.cuda.Event()
        self._end.record()

    def seconds(self) -> Optional[float]:
        if self._seconds is None and self._end is not None and self._end.done:
            self._seconds = cupy.cuda.get_elapsed_time(self._start, self._end) / 1e3
            self._start = self._end = None  # the events are no longer needed
        return self._seconds
