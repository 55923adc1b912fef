"""How ``tools/bench.py`` times: blocks of consecutive calls per competitor, rotated, repeated.

Each competitor is timed alone: a round gives every competitor one latency block and one
throughput block of ``block`` consecutive calls, and the order of the competitors rotates from
round to round, so no competitor always follows the same one. Figures are medians over blocks,
with the interquartile range (IQR) over blocks as the spread. Nothing here imports CuPy, PyTorch
or JAX: the loop only calls what a competitor and its framework adapter offer, so the CPU tests
run it with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

MIN_BLOCK = 200  # calls per block: the issue's floor for a skeptic
MIN_ROUNDS = 5


@dataclass(frozen=True)
class Schedule:
    """Block size, rounds and the untimed calls that open each block."""

    block: int = MIN_BLOCK
    rounds: int = MIN_ROUNDS
    lead_in: int = 5  # untimed calls before each block: the first call after another competitor's block

    def __post_init__(self) -> None:
        if self.block < 1 or self.rounds < 1 or self.lead_in < 0:
            raise ValueError(f"block and rounds must be >= 1 and lead_in >= 0, got {self}")


def rotation(keys: Sequence[str], round_index: int) -> list[str]:
    """The order of ``keys`` in round ``round_index``: round r starts with keys[r mod len]."""
    if not keys:
        return []
    start = round_index % len(keys)
    return list(keys[start:]) + list(keys[:start])


def spread(values: Iterable[float]) -> dict[str, float]:
    """Median, quartiles and IQR (linear interpolation, as numpy.percentile) of block figures."""
    data = np.asarray(list(values), dtype=np.float64)
    if data.size == 0:
        raise ValueError("no blocks to summarise")
    q1, median, q3 = np.percentile(data, [25, 50, 75])
    return dict(median=float(median), q1=float(q1), q3=float(q3), iqr=float(q3 - q1), blocks=int(data.size))


@dataclass
class BlockFigures:
    """Per-block figures of one competitor (µs per call)."""

    latency: list[float]
    host_issue: list[float]
    gpu: list[float]

    def summary(self) -> dict[str, Any]:
        lat, host, gpu = spread(self.latency), spread(self.host_issue), spread(self.gpu)
        return dict(latency_us=lat["median"], latency_iqr_us=lat["iqr"], latency_q1_us=lat["q1"],
                    latency_q3_us=lat["q3"], host_issue_us=host["median"], host_issue_iqr_us=host["iqr"],
                    gpu_us=gpu["median"], gpu_iqr_us=gpu["iqr"], gpu_q1_us=gpu["q1"], gpu_q3_us=gpu["q3"],
                    blocks=lat["blocks"], latency_blocks_us=list(self.latency),
                    host_issue_blocks_us=list(self.host_issue), gpu_blocks_us=list(self.gpu))


def latency_block(c: Any, calls: int, device_sync: Callable[[], None], clock: Callable[[], float]) -> float:
    """Median µs of ``calls`` synchronised calls, the device idle before each one."""
    times = []
    inputs = c.inputs
    for j in range(calls):
        x = inputs[j % len(inputs)]
        device_sync()
        start = clock()
        c.fw.finish(c.call(x))
        times.append((clock() - start) * 1e6)
    return float(np.median(times))


def throughput_block(c: Any, calls: int, device_sync: Callable[[], None],
                     clock: Callable[[], float]) -> tuple[float, float]:
    """(host issue µs per call, GPU µs per call) of ``calls`` back-to-back calls."""
    inputs = c.inputs
    device_sync()
    token = c.fw.start()
    start = clock()
    out = None
    for j in range(calls):
        out = c.call(inputs[j % len(inputs)])
    issued = clock() - start
    gpu_ms = c.fw.stop(token, out)
    c.fw.finish(out)
    return issued * 1e6 / calls, gpu_ms * 1e3 / calls


def measure(competitors: list[Any], schedule: Schedule, device_sync: Callable[[], None],
            pin: Optional[Callable[[], None]] = None,
            clock: Callable[[], float] = time.perf_counter) -> tuple[dict[str, dict], dict[str, str]]:
    """Time every competitor in rotated blocks. Returns (summary by key, errors by key).

    A competitor that raises is dropped from the remaining rounds and reported with its error;
    the others go on. ``pin`` runs before every block (it restores the pinned device).
    """
    by_key = {c.key: c for c in competitors}
    alive = [c.key for c in competitors]
    figures = {key: BlockFigures([], [], []) for key in alive}
    errors: dict[str, str] = {}
    for r in range(schedule.rounds):
        for key in rotation(alive, r):
            c = by_key[key]
            try:
                if pin is not None:
                    pin()
                for j in range(schedule.lead_in):
                    c.fw.finish(c.call(c.inputs[j % len(c.inputs)]))
                lat = latency_block(c, schedule.block, device_sync, clock)
                host, gpu = throughput_block(c, schedule.block, device_sync, clock)
            except Exception as err:
                errors[key] = f"while timing (round {r + 1} of {schedule.rounds}): {type(err).__name__}: {err}"
                alive.remove(key)
                continue
            figures[key].latency.append(lat)
            figures[key].host_issue.append(host)
            figures[key].gpu.append(gpu)
    return {key: figures[key].summary() for key in alive}, errors


def pool_bytes(segments: Iterable[dict], device: int, pools: Optional[Iterable[Any]] = None,
               exclude: Iterable[Any] = ()) -> int:
    """Bytes of the allocator segments that belong to private pools, from a memory snapshot.

    ``segments`` is ``torch.cuda.memory_snapshot()`` (or anything shaped like it). With ``pools``,
    only segments of those pool ids count; otherwise every private pool (not the default (0, 0))
    not in ``exclude`` counts. A sum of segment sizes that exist now, never a difference of two
    totals, so it cannot go negative when something else frees memory in between.
    """
    wanted = {tuple(p) for p in pools} if pools is not None else None
    skipped = {tuple(p) for p in exclude} | {(0, 0)}
    total = 0
    for seg in segments:
        if seg.get("device") != device:
            continue
        pool = tuple(seg.get("segment_pool_id", (0, 0)))
        if (pool in wanted) if wanted is not None else (pool not in skipped):
            total += max(0, int(seg.get("total_size", 0)))
    return total


def private_pools(segments: Iterable[dict], device: int) -> set[tuple]:
    """Pool ids of the private pools (not the default one) that hold segments on ``device``."""
    return {tuple(s.get("segment_pool_id", (0, 0))) for s in segments if s.get("device") == device} - {(0, 0)}
