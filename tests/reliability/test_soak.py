"""Soak on the host backend: many replays of a small graph leave memory and Python objects flat.

Measured after a warm-up phase (caches filled, graphs captured): host memory traced by
tracemalloc and the number of objects the garbage collector tracks in one test, the process's
resident set (RSS, from /proc) in another, without tracemalloc's own bookkeeping in the way. Each
asserts a bound that does not grow with the number of replays, so a leak of a few dozen bytes per
call fails. The drift figures are printed (``pytest -s``) and appended to
``$CUPYGRAPH_RELIABILITY_OUT`` when set. Default 20 000 replays per mode, ``--soak`` 200 000 (the
1 000 000-replay run is the GPU variant, ``test_soak_gpu.py``).
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from reliability_helpers import check_stats, record

import cupygraph as cg

MODES = ["copy", "view", "view_debug"]
WARM = 2_000
STATM = Path("/proc/self/statm")
# Resident-set growth allowed over the whole replay phase, whatever its length (the allocator's
# page-granular noise; 0 B in every run so far). A native leak of 64 bytes per call, which
# tracemalloc does not see, grows the resident set by more than 1 MiB over 20 000 replays.
RSS_SLACK = 512 * 1024


def small(x):
    return x * 2 + 1


def python_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def resident_bytes() -> Optional[int]:
    """The process's current resident set (Linux); None where /proc is missing."""
    try:
        pages = int(STATM.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def warmed_up(mode: str) -> tuple[cg.GraphedFunction, list[np.ndarray]]:
    """A jitted function holding two graphs (alternating sizes), called WARM times."""
    config = dict(backend="host", capture_sizes=[4, 8], output_mode="copy" if mode == "copy" else "view",
                  debug=mode == "view_debug")
    f = cg.jit(small, config=config)
    xs = [np.random.default_rng(i).standard_normal((3 + 4 * i, 16)) for i in range(2)]
    for i in range(WARM):
        f(xs[i % 2])
    return f, xs


def check_result_and_stats(f: cg.GraphedFunction, xs: list[np.ndarray], replays: int) -> None:
    assert np.array_equal(f(xs[0]), small(xs[0]))
    check_stats(f, WARM + replays + 1)
    assert f.stats().hits == WARM + replays + 1 - 2


@pytest.mark.parametrize("mode", MODES)
def test_replays_keep_memory_and_objects_flat(mode, soak):
    replays = 200_000 if soak else 20_000
    f, xs = warmed_up(mode)
    tracemalloc.start()
    try:
        objects_before = python_objects()
        traced_before, _ = tracemalloc.get_traced_memory()
        for i in range(replays):
            out = f(xs[i % 2])
        del out
        objects_after = python_objects()
        traced_after, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    check_result_and_stats(f, xs, replays)
    drift = {
        "python_objects": objects_after - objects_before,
        "traced_bytes": traced_after - traced_before,
        "traced_peak_bytes": traced_peak - traced_before,
    }
    record("soak", f"host {replays} replays ({mode})", cases=replays, drift=drift,
           objects_per_call=round(drift["python_objects"] / replays, 6))
    # Flat: a bounded number of objects and bytes whatever the number of replays (no per-call growth).
    assert drift["python_objects"] < 200, drift
    assert drift["traced_bytes"] < 64 * 1024, drift


@pytest.mark.skipif(resident_bytes() is None, reason="the resident set is read from /proc/self/statm (Linux only)")
@pytest.mark.parametrize("mode", MODES)
def test_replays_keep_the_resident_set_flat(mode, soak):
    replays = 200_000 if soak else 20_000
    f, xs = warmed_up(mode)
    gc.collect()
    before = resident_bytes()
    for i in range(replays):
        out = f(xs[i % 2])
    del out
    gc.collect()
    grown = resident_bytes() - before
    check_result_and_stats(f, xs, replays)
    record("soak", f"host {replays} replays, resident set ({mode})", cases=replays, drift={"rss": grown})
    assert grown <= RSS_SLACK, f"RSS grew by {grown} bytes over {replays} replays after the warm-up"
