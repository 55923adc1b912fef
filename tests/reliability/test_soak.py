"""Soak on the host backend: many replays of a small graph leave memory and Python objects flat.

Measured after a warm-up phase (caches filled): host memory traced by tracemalloc, the process's
peak RSS, and the number of objects the garbage collector tracks. The drift figures are printed
(``pytest -s``) and appended to ``$CUPYGRAPH_RELIABILITY_OUT`` when set. Default 20 000 replays per
mode, ``--soak`` 200 000 (the 1 000 000-replay run is the GPU variant, ``test_soak_gpu.py``).
"""

from __future__ import annotations

import gc
import resource
import tracemalloc

import numpy as np
import pytest
from reliability_helpers import check_stats, record

import cupygraph as cg


def small(x):
    return x * 2 + 1


def python_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.parametrize("mode", ["copy", "view", "view_debug"])
def test_replays_keep_memory_and_objects_flat(mode, soak):
    replays = 200_000 if soak else 20_000
    config = dict(backend="host", capture_sizes=[4, 8], output_mode="copy" if mode == "copy" else "view",
                  debug=mode == "view_debug")
    f = cg.jit(small, config=config)
    xs = [np.random.default_rng(i).standard_normal((3 + 4 * i, 16)) for i in range(2)]  # two graphs, alternating
    warm = 2_000
    for i in range(warm):
        f(xs[i % 2])
    tracemalloc.start()
    try:
        objects_before = python_objects()
        traced_before, _ = tracemalloc.get_traced_memory()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for i in range(replays):
            out = f(xs[i % 2])
        del out
        objects_after = python_objects()
        traced_after, traced_peak = tracemalloc.get_traced_memory()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        tracemalloc.stop()
    assert np.array_equal(f(xs[0]), small(xs[0]))
    check_stats(f, warm + replays + 1)
    assert f.stats().hits == warm + replays + 1 - 2
    drift = {
        "python_objects": objects_after - objects_before,
        "traced_bytes": traced_after - traced_before,
        "traced_peak_bytes": traced_peak - traced_before,
        "max_rss_kib": rss_after - rss_before,
    }
    record("soak", f"host {replays} replays ({mode})", cases=replays, drift=drift,
           objects_per_call=round(drift["python_objects"] / replays, 6))
    # Flat: a bounded number of objects and bytes whatever the number of replays (no per-call growth).
    assert drift["python_objects"] < 200, drift
    assert drift["traced_bytes"] < 64 * 1024, drift
