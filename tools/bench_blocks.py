"""Timing blocks of the hot-path benchmarks (``tools/bench_zero_copy.py``, ``tools/bench_targets.py``):
one competitor's figure per block of consecutive calls, competitors rotated from round to round
(``tools/bench_method.py``'s rotation and spread), and the callers that take their input from several
buffers. CuPy is imported inside each block's function, so the module imports without a GPU."""

from __future__ import annotations

import time
from typing import Any

from tools.bench_method import rotation, spread


def host_block(call, reps: int) -> float:
    """Host time per call of one block of ``reps`` consecutive calls (no synchronisation inside)."""
    import cupy

    start = time.perf_counter()
    for _ in range(reps):
        call()
    took = (time.perf_counter() - start) / reps * 1e6
    cupy.cuda.Device().synchronize()
    return took


def latency_block(call, reps: int) -> float:
    """Host time per call including the device finishing the work (call + sync), one block."""
    import cupy

    sync = cupy.cuda.Device().synchronize
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        call()
        sync()
    return (time.perf_counter() - start) / reps * 1e6


def gpu_block(call, reps: int) -> float:
    """GPU time per call back to back: events around one block of ``reps`` consecutive calls."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(reps):
        call()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / reps


def rotated(block, calls: dict, reps: int, rounds: int = 7) -> dict:
    """Median per competitor of ``block(call, reps)``: each competitor alone in its blocks, the order
    of the competitors rotated from round to round (never interleaved call by call)."""
    import cupy

    for call in calls.values():  # warm every competitor up first
        for _ in range(min(reps, 200)):
            call()
    cupy.cuda.Device().synchronize()
    figures: dict = {name: [] for name in calls}
    for r in range(rounds):
        for name in rotation(list(calls), r):
            figures[name].append(block(calls[name], reps))
    return {name: spread(values)["median"] for name, values in figures.items()}


def in_order(graphed: Any, inputs: list, order: list[int], *rest: Any) -> Any:
    """A call that takes its input from ``inputs`` by the indices of ``order``, one after another and
    round again (a data loader's ring, in turn or shuffled), ``rest`` the same objects at every call."""
    state = [0]
    count = len(order)

    def call() -> None:
        i = state[0] = (state[0] + 1) % count
        graphed(inputs[order[i]], *rest)

    return call
