"""Issue 32 on a real GPU: each key's memory measured at capture matches what the family's pool and the
device hold, within 1 %; a warm-up under a time budget on the stencil workload (the demo's heat pipeline)
captures the most used sizes first, and the sizes it left replay after their first call.

Memory is compared on buffers of 512 MiB: the driver hands out memory in pages of up to 2 MiB, and
the family's pool starts each block of 4 KiB or more on a 4 KiB boundary (``DeviceBlocks.ALIGNMENT``), so
small buffers would be all rounding. Replays are compared with eager bit for bit (the kernels are
deterministic).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.api.warmup import most_used_first
from cupygraph.cache.memory import base_array

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

ROWS, COLS = 64, 1 << 21  # 512 MiB of float32 per (ROWS, COLS) array


def two_steps(x):
    y = x * 2.0
    return y + 1.0


def settled_free_bytes() -> int:
    """The device's free memory once everything enqueued ran and CuPy's default pools hold nothing cached
    (the warm-up's example arrays and snapshots come from them and are gone)."""
    gc.collect()
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    return int(cupy.cuda.runtime.memGetInfo()[0])


def loaded(fn, x):
    """``fn`` jitted, after one eager run and one throw-away warm-up of another jitted copy: every kernel
    module the measured capture runs (the function's, the padding fill's) is loaded before it."""
    fn(x)
    scratch = cg.jit(fn, config=dict(backend="cupy", capture_sizes=[ROWS]))
    scratch.warmup(x, progress=False)
    scratch.clear()
    return cg.jit(fn, config=dict(backend="cupy", capture_sizes=[ROWS]))


def within_one_percent(measured: int, held: int) -> bool:
    return abs(measured - held) <= 0.01 * held


def test_pool_bytes_are_what_the_family_pool_took_for_the_key():
    x = cupy.asarray(np.random.default_rng(0).random((ROWS - 3, COLS), dtype=np.float32))
    f = loaded(two_steps, x)
    backend = f.registry.backend
    pool_before, cupy_pool_before = backend.pool_bytes(), backend.pool.total_bytes()
    assert f.warmup(x, progress=False) == 1
    (cost,) = f.stats().costs()
    assert cost.pool_bytes == backend.pool_bytes() - pool_before  # the family's cudaMallocs, exactly
    # CuPy's own count of the family pool leaves out the 4 KiB alignment of each block.
    assert within_one_percent(cost.pool_bytes, backend.pool.total_bytes() - cupy_pool_before)
    (entry,) = f.registry.entries()
    static = sum(int(base_array(b).nbytes) for b in entry.static_inputs)
    # The static buffer and the two intermediates of the warm-up (the capture run reuses their blocks).
    assert static == ROWS * COLS * 4 and within_one_percent(cost.pool_bytes, 3 * static)
    assert cost.executable_bytes is not None and "cudaMemGetInfo" in cost.executable_source
    assert cost.capture_s > 0
    assert f"{cost.pool_bytes:,}" in f.describe() and "cudaMemGetInfo" in f.describe()
    y = x[:5].copy()
    want = two_steps(y)
    got = f(y), f(y)
    for out in got:
        np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(want))


def test_pool_and_executable_bytes_are_what_the_device_gave_up():
    x = cupy.asarray(np.random.default_rng(1).random((ROWS, COLS), dtype=np.float32))
    f = loaded(two_steps, x)
    free_before = settled_free_bytes()
    f.warmup(x, progress=False)
    drop = free_before - settled_free_bytes()
    (cost,) = f.stats().costs()
    assert within_one_percent(cost.total_bytes, drop), (cost, drop)
    f.clear()


def test_over_a_family_the_keys_pool_bytes_add_up_to_the_pool():
    x = cupy.asarray(np.random.default_rng(2).random((8, 1 << 16), dtype=np.float32))
    f = cg.jit(two_steps, config=dict(backend="cupy", capture_sizes=[8, 16, 32, 64]))
    assert f.warmup(x, progress=False) == 4  # largest first: the smaller graphs reuse its blocks
    costs = f.stats().costs()
    assert sum(c.pool_bytes for c in costs) == f.registry.backend.pool_bytes()
    by_size = {c.size: c.pool_bytes for c in costs}
    assert by_size[64] >= 64 * (1 << 16) * 4 and by_size[64] == max(by_size.values())


def test_a_budgeted_warmup_of_the_stencil_captures_the_most_used_sizes_first():
    from cupygraph.demo import build_workload

    work = build_workload("cupy", calls=300)
    graphed, xs = work.graphed, work.inputs
    for x in xs:  # the traffic (its histogram stays through clear())
        graphed(x)
    traffic = graphed.stats().batch_sizes
    graphed.clear()
    config = graphed.config
    order = most_used_first(config.cudagraph_capture_sizes, traffic, config.get_padded_batch_size)
    captured = graphed.warmup(xs[0], progress=False, budget_s=0.05)
    held = {e.key.descriptor.num_tokens for e in graphed.registry.entries()}
    print(f"traffic order {order}; captured within 0.05 s: {sorted(held, key=order.index)}")
    assert captured == len(held) >= 1  # the first capture starts at once
    assert held == set(order[:captured])  # the most used sizes, and no other
    by_padded = {}
    for x in xs:
        by_padded.setdefault(config.get_padded_batch_size(x.shape[0]), x)
    for padded in order[captured:]:  # each size the budget left: captured by its first call, then replayed
        x = by_padded.get(padded)
        if x is None:  # no traffic pads to it: call it at its own size
            x = cupy.asarray(np.random.default_rng(padded).random((padded, *xs[0].shape[1:]), dtype=np.float32))
        before = graphed.stats()
        want = work.eager(x)
        first, second = graphed(x), graphed(x)
        after = graphed.stats()
        assert after.captures == before.captures + 1 and after.hits == before.hits + 1
        assert after.capture_failures == 0
        for out in (first, second):
            np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(want))
    assert {e.key.descriptor.num_tokens for e in graphed.registry.entries()} == set(order)
    assert all(c.capture_s > 0 for c in graphed.stats().costs())
