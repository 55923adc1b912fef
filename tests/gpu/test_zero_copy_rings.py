"""Callers that cycle among a few input buffers (a prefetch ring) under zero-copy (issue 30).

A graph keeps up to ``executables_per_graph`` executables, each holding one set of caller addresses:
once each buffer has been seen, a call launches the executable that already holds its addresses and
re-points no node. Beyond the bound the least recently used one is re-pointed. Every result is
compared bit for bit with eager CuPy on the same fresh random data, in a random order of buffers.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

ROWS, COLS = 16, 64


def step(x):
    return cupy.tanh(x * np.float32(1.5)) + x


def cycle(graphed, buffers, calls, rng):
    """``calls`` calls on buffers in random order, each refilled with fresh data first; the repointed
    calls counted once every buffer had been seen."""
    seen, repointed_after_warm = set(), None
    for i in range(calls):
        k = int(rng.integers(len(buffers)))
        x = buffers[k]
        x[...] = cupy.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
        hits = graphed.stats().hits
        got = graphed(x)
        want = step(x)
        assert np.array_equal(cupy.asnumpy(got), cupy.asnumpy(want)), f"call {i}, buffer {k}"
        if graphed.stats().hits > hits:  # bound by a replay (the call that captured ran the function as it is)
            seen.add(k)
        if len(seen) == len(buffers) and repointed_after_warm is None:
            repointed_after_warm = graphed.stats().repointed_calls
    return repointed_after_warm


@pytest.mark.parametrize("count", [2, 4, 8])
def test_a_ring_of_up_to_eight_buffers_repoints_nothing_once_each_was_seen(count):
    rng = np.random.default_rng(count)
    graphed = cg.jit(step, config={"capture_sizes": [ROWS], "output_mode": "view"})
    buffers = [cupy.empty((ROWS, COLS), np.float32) for _ in range(count)]
    warm = cycle(graphed, buffers, 40 * count, rng)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.executables_made == count - 1, stats.to_dict()
    assert stats.repointed_calls == warm, "a call re-pointed an executable although one held its addresses"
    assert stats.executable_instantiate_s > 0
    # The memory of the extra executables, as each measured its own instantiation and upload
    [entry] = graphed.registry.entries()
    extra = entry.recording.banks[1:]
    assert len(extra) == count - 1 and stats.executable_bytes_made == sum(bank.nbytes for bank in extra)
    assert stats.to_dict()["executable_bytes_made"] == stats.executable_bytes_made


def test_more_buffers_than_executables_repoint_the_least_recently_used():
    rng = np.random.default_rng(11)
    graphed = cg.jit(step, config={"capture_sizes": [ROWS], "output_mode": "view", "executables_per_graph": 3})
    buffers = [cupy.empty((ROWS, COLS), np.float32) for _ in range(5)]
    cycle(graphed, buffers, 120, rng)
    stats = graphed.stats()
    assert stats.executables_made == 2 and stats.repointed_calls > 3 and stats.fallbacks == 0


def test_one_executable_per_graph_repoints_at_every_change():
    rng = np.random.default_rng(12)
    graphed = cg.jit(step, config={"capture_sizes": [ROWS], "output_mode": "view", "executables_per_graph": 1})
    buffers = [cupy.empty((ROWS, COLS), np.float32) for _ in range(2)]
    for i in range(20):
        x = buffers[i % 2]
        x[...] = cupy.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
        assert np.array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(step(x)))
    stats = graphed.stats()
    assert stats.executables_made == 0 and stats.repointed_calls >= 18


@pytest.mark.parametrize("count", [3, 8])
def test_copied_outputs_stay_right_in_any_order(count):
    rng = np.random.default_rng(20 + count)
    graphed = cg.jit(step, config={"capture_sizes": [ROWS], "output_mode": "copy"})
    buffers = [cupy.empty((ROWS, COLS), np.float32) for _ in range(count)]
    kept = []
    for i in range(30 * count):
        x = buffers[int(rng.integers(count))]
        x[...] = cupy.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
        got = graphed(x)
        assert np.array_equal(cupy.asnumpy(got), cupy.asnumpy(step(x))), i
        if rng.random() < 0.3:  # some results kept a while: the output ring cannot take them back
            kept = [*kept[-2:], (got, cupy.asnumpy(got))]
        for array, values in kept:  # a result handed out earlier is never overwritten
            assert np.array_equal(cupy.asnumpy(array), values)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.executables_made <= 7
