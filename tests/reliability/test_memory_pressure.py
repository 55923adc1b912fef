"""Memory pressure on the host backend: a stream of calls over many distinct shapes under a
``memory_budget`` never holds more than the budget, evicts cold shapes first, and every result is
right.

The budget is checked two ways after every call: the registry's own account
(``registry.total_bytes()``), and the NumPy data the process really holds (tracemalloc's NumPy
domain), which also sees buffers the registry forgot to count or to let go of.
Default: 2 000 calls over 100 shapes; ``--soak``: 10 000 calls over 500 shapes. The GPU variant
(measured from the family's pool) is ``test_memory_pressure_gpu.py``.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from reliability_helpers import check_stats, record

import cupygraph as cg
from cupygraph.backends.host.backend import HostBackend
from cupygraph.cache import BatchedArg, CUDAGraphRegistry

ROWS = (1, 5, 17, 40)


def pipeline(x):
    return np.tanh(x) * 2 + x.sum(axis=1, keepdims=True)


def shapes(count: int) -> list[tuple[int, int]]:
    """``count`` distinct (rows, width) shapes: each width is its own signature (static buffers)."""
    widths = range(3, 3 + count // len(ROWS))
    return [(rows, width) for width in widths for rows in ROWS]


def numpy_bytes() -> int:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    )
    return sum(trace.size for trace in snapshot.traces)


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_stream_of_shapes_stays_under_budget_and_keeps_hot_shapes(eviction, soak):
    calls, count = (10_000, 500) if soak else (2_000, 100)
    all_shapes = shapes(count)
    assert len(set(all_shapes)) == count
    hot = all_shapes[:5]
    widest = max(w for _, w in all_shapes)
    budget = 8 * 2 * 64 * widest * 8  # about eight of the largest graphs
    config = dict(backend="host", max_capture_size=64, memory_budget=budget, eviction=eviction)
    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        baseline = numpy_bytes()
        f = cg.jit(pipeline, config=config)
        hot_calls = hot_hits = 0
        worst_held = worst_real = 0
        for i in range(calls):
            shape = hot[rng.integers(len(hot))] if rng.random() < 0.5 else all_shapes[rng.integers(count)]
            x = rng.standard_normal(shape)
            hits = f.stats().hits
            assert np.array_equal(f(x), pipeline(x)), (i, shape)
            if shape in hot and i >= calls // 10:
                hot_calls += 1
                hot_hits += f.stats().hits - hits
            held = f.registry.total_bytes()
            worst_held = max(worst_held, held)
            assert held <= budget, (i, held, budget)
            if i % 250 == 0 or i == calls - 1:
                del x
                real = numpy_bytes() - baseline
                worst_real = max(worst_real, real)
                assert real <= budget, f"call {i}: {real} bytes of arrays held, budget {budget}"
        check_stats(f, calls)
        stats = f.stats()
        assert stats.evictions > 0 and stats.fallbacks == 0
        # Cold shapes go first: the hot ones keep replaying.
        assert hot_hits / hot_calls > 0.9, (hot_hits, hot_calls)
        if eviction == "lfu":
            held_keys = {(e.key.descriptor.num_tokens, e.key.signature) for e in f.registry.entries()}
            for rows, width in hot:
                padded = f.config.get_padded_batch_size(rows)
                assert any(p == padded and BatchedArg((width,), np.dtype(np.float64)) in sig.args
                           for p, sig in held_keys), (rows, width)
        f.clear()
        del f
    finally:
        tracemalloc.stop()
    record("memory_pressure", f"host stream of {calls} calls over {count} shapes ({eviction})", cases=calls,
           drift={"budget_bytes": budget, "max_registry_bytes": worst_held, "max_numpy_bytes": worst_real},
           hot_hit_rate=round(hot_hits / hot_calls, 4), evictions=stats.evictions)


def test_static_buffers_of_evicted_signatures_are_released():
    """Regression: the shared static-input buffers of a signature stayed allocated after its last
    graph was evicted, so memory grew with every new trailing shape whatever the limits said."""
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=[8], max_cached_graphs=2))
    tracemalloc.start()
    try:
        base = numpy_bytes()
        for width in range(1, 200):
            x = np.ones((8, width * 10))
            assert np.array_equal(f(x), x + 1)
        del x
        assert len(f.registry.static_signatures()) <= 2
        real = numpy_bytes() - base
        assert real <= f.registry.total_bytes() + 8 * 1990 * 8, real
    finally:
        tracemalloc.stop()
    assert f.registry.num_graphs() == 2


def test_failed_captures_release_their_static_buffers():
    def fn(x):
        if x.shape[0] == 8 and x.shape[1] > 1:
            return x * float(x.max())  # a device-to-host read: refused at capture
        return x * 2

    f = cg.jit(fn, config=dict(backend="host", capture_sizes=[4, 8], num_warmups=0))
    f(np.ones((3, 1)))  # one graph held
    for width in range(2, 50):
        f(np.ones((7, width)))  # every one of these fails to capture
    assert f.registry.static_signatures() == {e.key.signature for e in f.registry.entries()}


def test_total_bytes_counts_shared_static_buffers_once_at_their_real_size():
    registry = CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", capture_sizes=[2, 8]))
    f = cg.GraphedFunction(lambda x: x * 2, registry=registry)
    f(np.ones((8, 10)))
    f(np.ones((2, 10)))  # reads a view of the 8-row buffer, which it keeps alive
    outputs = (8 + 2) * 10 * 8
    assert registry.total_bytes() == outputs + 8 * 10 * 8


class GrowingPoolBackend(HostBackend):
    """A host backend with a pool like the GPU's: blocks of evicted graphs stay cached (other
    graphs of the family may share them), so the pool only shrinks when the family is empty."""

    def __init__(self) -> None:
        self.cached = 0
        self.releases = 0

    def empty(self, shape, dtype):
        self.cached += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return super().empty(shape, dtype)

    def capture(self, fn, args, kwargs, **options):
        recording = super().capture(fn, args, kwargs, **options)
        self.cached += recording.nbytes
        return recording

    def pool_bytes(self) -> int:
        return self.cached

    def release_memory(self) -> None:
        self.cached = 0
        self.releases += 1


def test_pool_that_keeps_cached_blocks_is_brought_back_under_the_budget():
    """Regression (GPU semantics on the host): eviction lowered the registry's account but the
    pool kept every evicted graph's blocks, so the memory measured from the pool grew past
    ``memory_budget``. Now the family is dropped and the key recorded again when that happens."""
    backend = GrowingPoolBackend()
    budget = 6 * 2 * 16 * 8 * 8
    registry = CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", max_capture_size=16, memory_budget=budget),
                                 backend=backend)
    f = cg.GraphedFunction(lambda x: x * 3 - 1, registry=registry)
    rng = np.random.default_rng(1)
    for i in range(600):
        x = rng.standard_normal((int(rng.integers(1, 17)), int(rng.integers(1, 9))))
        assert np.array_equal(f(x), x * 3 - 1), i
        assert backend.pool_bytes() <= budget, (i, backend.pool_bytes())
        check_stats(f, i + 1)
    assert backend.releases > 0
    reasons = f.stats().evictions_by_reason
    assert reasons["pool_over_memory_budget"] > 0 and "by the pool" in f.stats().detail("pool_over_memory_budget")
    assert len(reasons) <= 3, reasons  # codes: a long run does not grow the counter


class RefusingBackend(HostBackend):
    """A host backend whose pool refuses static buffers above a size (like a pool with a limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def empty(self, shape, dtype):
        if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize > self.limit:
            raise MemoryError(f"pool limit {self.limit} bytes")
        return super().empty(shape, dtype)


def test_refused_allocations_fall_back_with_the_reason():
    """Regression: out-of-memory while allocating the static buffers or during the warm-up escaped
    as a raw MemoryError (CuPy's OutOfMemoryError), although eager would have run; it now falls back
    like an allocation refused during capture (or raises CaptureError under raise)."""
    registry = CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", capture_sizes=[4, 64]),
                                 backend=RefusingBackend(limit=4 * 8 * 8))
    f = cg.GraphedFunction(lambda x: x + 1, registry=registry)
    small, big = np.ones((3, 8)), np.ones((40, 8))
    assert np.array_equal(f(small), small + 1) and np.array_equal(f(big), big + 1)
    assert f.registry.num_graphs() == 1
    assert f.stats().fallbacks_by_reason == {"out_of_memory": 1}
    assert "pool limit" in f.stats().detail("out_of_memory")

    def greedy(x):
        if x.shape[0] == 8:  # only the padded warm-up asks for the impossible
            np.empty((x.shape[0], 2**50), dtype=np.uint8)
        return x * 2

    g = cg.jit(greedy, config=dict(backend="host", capture_sizes=[8]))
    x = np.ones((5, 3))
    assert np.array_equal(g(x), x * 2)
    assert g.stats().capture_failures == 1 and g.registry.num_graphs() == 0
    strict = cg.jit(greedy, config=dict(backend="host", capture_sizes=[8], on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match="out of memory"):
        strict(x)


def test_a_failed_capture_lets_go_of_its_static_buffers_even_when_logs_keep_records():
    """Regression (found on the GPU: the family's pool kept 8 KiB per failed capture): the fallback
    warning logged the exception object, so a handler that keeps records (pytest's, a
    MemoryHandler) kept its traceback, whose frames held the static buffers."""
    import gc
    import logging

    kept: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record)

    def fn(x):
        if x.shape[0] == 1024:  # only the padded static buffer: the capture fails, eager runs
            return x * float(x.max())  # a device-to-host read: refused at capture
        return x * 2

    handler = Keep(level=logging.WARNING)
    logging.getLogger("cupygraph").addHandler(handler)
    tracemalloc.start()
    try:
        f = cg.jit(fn, config=dict(backend="host", capture_sizes=[1024], num_warmups=0))
        x = np.ones((3, 1000))
        base = numpy_bytes()
        assert np.array_equal(f(x), x * 2)
        gc.collect()
        held = numpy_bytes() - base
    finally:
        tracemalloc.stop()
        logging.getLogger("cupygraph").removeHandler(handler)
    assert kept and "runs eagerly" in kept[0].getMessage()
    assert held < 1024 * 1000 * 8 // 4, held  # the 8 MB static buffer is gone
