"""Which of cuBLASLt's proposed algorithms a GEMM key keeps: the fastest, timed once per key.

cuBLASLt's heuristic ranks its proposals by a model, and for some shapes its first answer is far from
the fastest: for one row of a 1024 x 1024 float32 layer with bias and ReLU its first answer ran 14 µs
a layer in a graph on an H200, where another of its proposals runs 3.5 µs (``benchmarks/gemm.md``).
So the first product of a key (never a capture: ``_lt_plans`` makes no plan then) runs each of up to
``CANDIDATES`` proposals on the real operands, writing a scratch result, and keeps the fastest for
the process. Every later call and every capture of the key then runs that one kernel, so replay
equals eager bit for bit within a process (a key beyond the table ``_lt_plans`` keeps is never timed,
for the same reason). Timing that fails, its scratch result included, keeps the heuristic's first.

What is timed is GPU time as a graph runs it: back-to-back calls recorded into a CUDA graph on a side
stream, the graph's launch timed with events (``_gemm_lt.GraphTimer``). Timing eager calls would
measure the host instead: a cuBLASLt call takes about 8 µs to issue, longer than many of these kernels
run, so eager timings of one-row products all read 8 to 13 µs and the choice among them was noise
(H200, 2026-11-27).

The cost: a few small graphs and one stream synchronisation per proposal, once per key (at ``jit``'s
warm-up). A timed choice may differ between processes where two kernels are nearly as fast; a process
that needs the same kernel (and the same rounding) every run sets ``CUPYGRAPH_GEMM_TUNING=heuristic``,
which keeps the heuristic's first answer without timing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

ENV = "CUPYGRAPH_GEMM_TUNING"
MODES = ("timed", "heuristic")
CANDIDATES = 8  # proposals asked of the heuristic where they are timed
LONG_CALL_S = 1e-3  # a candidate slower than this is timed from one run, not a block
BLOCK = 10  # runs per timed block of a short candidate

Proposal = TypeVar("Proposal")


class Timer(Protocol):
    """Times runs on the stream of the product being planned (``_gemm_lt`` makes one from CUDA events)."""

    def scratch(self, nbytes: int) -> int:
        """The address of ``nbytes`` of device memory, 256-byte aligned (as cuBLASLt assumes at most), kept
        until the timer is dropped."""

    def seconds(self, run: Callable[[int], None], repeats: int) -> float:
        """Device seconds per call of ``repeats`` back-to-back calls of ``run(stream)``, on a stream of the
        timer's choosing, with no host time between them."""


class Timed(NamedTuple):
    chosen: int  # index into the proposals, in the heuristic's order
    seconds: tuple[float, ...]  # per proposal; inf where it failed


def tuning_mode() -> str:
    """``CUPYGRAPH_GEMM_TUNING`` (default ``timed``), checked."""
    mode = os.environ.get(ENV, "timed").strip().lower() or "timed"
    if mode not in MODES:
        raise ValueError(f"{ENV}={mode!r} is not a GEMM tuning mode; valid: {', '.join(MODES)}")
    return mode


def requested_proposals() -> int:
    return CANDIDATES if tuning_mode() == "timed" else 1


def fastest(proposals: Sequence[Proposal], run: Callable[[Proposal], Callable[[int], None]], timer: Timer,
            failures: tuple[type[BaseException], ...], stream: int) -> Timed:
    """Time every proposal (``run(p)(stream)`` makes one call of it); the fastest one's index.

    A proposal whose run raises one of ``failures`` (a status cuBLASLt returns for a kernel that cannot
    run these operands) is skipped; where all fail, the first is kept and its real call reports why.
    """
    seconds = []
    for proposal in proposals:
        call = run(proposal)
        try:
            call(stream)  # the first run, on the product's own stream, loads the kernel; not timed
            once = timer.seconds(call, 1)
            seconds.append(once if once > LONG_CALL_S else timer.seconds(call, BLOCK))
        except failures:
            seconds.append(math.inf)
    best = min(range(len(seconds)), key=seconds.__getitem__, default=0)
    return Timed(best, tuple(seconds))
