"""Memory pressure on the GPU: under ``memory_budget`` a stream of calls over many distinct shapes
keeps the family's pool (``backend.pool_bytes()``, the device memory it holds) within the budget
after every call, keeps replaying the hot shapes, and every result is bit for bit the eager one.

Default: 1 000 calls over 100 shapes; ``--soak``: 10 000 calls over 500 shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from reliability_gpu import assert_same, drift, memory_figures, rand  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402

import cupygraph as cg  # noqa: E402

ROWS = (1, 5, 17, 40)


def pipeline(x):
    y = cupy.tanh(x) * 2
    return y + x[:, :1]  # row-independent: bit for bit


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_stream_of_shapes_stays_within_the_budget_measured_from_the_pool(eviction, soak):
    calls, count = (10_000, 500) if soak else (1_000, 100)
    widths = [64 * (1 + i) for i in range(count // len(ROWS))]
    shapes = [(rows, width) for width in widths for rows in ROWS]
    hot = shapes[:5]
    rng = np.random.default_rng(0)
    # The budget: a few times what the widest shape's graph holds on its own.
    probe = cg.jit(pipeline, config=dict(max_capture_size=64))
    probe(rand(rng, 40, widths[-1]))
    budget = 6 * probe.registry.backend.pool_bytes()
    probe.clear()
    f = cg.jit(pipeline, config=dict(max_capture_size=64, memory_budget=budget, eviction=eviction))
    backend = f.registry.backend
    before = memory_figures(backend)
    worst = hot_calls = hot_hits = 0
    for i in range(calls):
        shape = hot[rng.integers(len(hot))] if rng.random() < 0.5 else shapes[rng.integers(count)]
        x = rand(rng, *shape)
        hits = f.stats().hits
        assert_same(f(x), pipeline(x))
        if shape in hot and i >= calls // 10:
            hot_calls += 1
            hot_hits += f.stats().hits - hits
        held = backend.pool_bytes()
        worst = max(worst, held)
        assert held <= budget, f"call {i}: the pool holds {held} bytes, budget {budget}"
        assert f.registry.total_bytes() <= budget
    check_stats(f, calls)
    stats = f.stats()
    f.clear()
    after = memory_figures(backend)
    record("memory_pressure", f"gpu {calls} calls over {count} shapes ({eviction})", backend="cupy", cases=calls,
           drift={**drift(before, after), "budget_bytes": budget, "max_pool_bytes": worst},
           hot_hit_rate=round(hot_hits / max(hot_calls, 1), 4), evictions=stats.evictions,
           evictions_by_reason=dict(stats.evictions_by_reason))
    assert stats.evictions > 0 and stats.fallbacks == 0
    assert hot_hits / hot_calls > 0.5, (hot_hits, hot_calls, dict(stats.evictions_by_reason))
    assert after["family_pool_bytes"] == 0
