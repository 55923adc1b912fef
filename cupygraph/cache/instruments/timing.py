"""What one key's graph is measured to cost and save: eager, replay and capture times.

``KeyTiming`` is filled from measurements only: the eager time is the function's last warm-up
run before capture (timed on the device by the backend, ``Recording.warmup_sample``), the
capture time is the entry's ``capture_time`` (the host time of warm-ups, capture, instantiation
and audit: what evicting the graph costs when the key comes back), and the replay time is
sampled on the device every Nth replay when ``replay_timing_every`` is set (else the policy falls
back on the host launch time, which entries keep only under ``time_replays``). The eviction policy ``benefit`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from ...backends.timing import Sample


class KeyTiming:
    """Measured times of one graph (seconds); ``None`` where nothing was measured. Its capture time is
    the entry's own (``CUDAGraphEntry.capture_time``)."""

    __slots__ = ("_pending", "countdown", "eager_sample", "replay_samples", "replay_total_s")

    def __init__(self, eager_sample: Optional[Sample] = None):
        self.eager_sample = eager_sample
        self.replay_samples = 0
        self.replay_total_s = 0.0
        self.countdown = 0
        self._pending: Optional[Sample] = None

    def eager_s(self) -> Optional[float]:
        return None if self.eager_sample is None else self.eager_sample.seconds()

    def replay_s(self) -> Optional[float]:
        """Mean device time of the sampled replays (None before the first sample completed)."""
        self.collect()
        return self.replay_total_s / self.replay_samples if self.replay_samples else None

    def collect(self) -> bool:
        """Fold a finished sample in; True when none is pending any more."""
        pending = self._pending
        if pending is None:
            return True
        seconds = pending.seconds()
        if seconds is None:
            return False
        self.replay_total_s += seconds
        self.replay_samples += 1
        self._pending = None
        return True

    def sampled(self, launch: Callable[[], None], start: Callable[[], Sample], every: int) -> Callable[[], None]:
        """``launch`` timed on the device every ``every``-th call (skipped while a sample is in flight)."""
        self.countdown = every

        def sampled_launch() -> None:
            self.countdown -= 1
            if self.countdown > 0:
                launch()
                return
            self.countdown = every
            if not self.collect():  # the last sample's replay has not finished: do not wait for it
                launch()
                return
            sample = start()
            launch()
            sample.stop()
            self._pending = sample

        return sampled_launch

