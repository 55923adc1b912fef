"""The compiled replay (``backends/fastpath/record.py``) on a real GPU: the calls it serves equal eager bit
for bit on fresh random data with the static buffers poisoned, and every call it must not serve
(another stream, a padded batch, an output still held, a view, an evicted graph, timing on) is
served by the Python path, equally right."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers, run_threads  # noqa: E402

from cupygraph.backends.fastpath.record import COMPILED  # noqa: E402
from cupygraph.kernels import get_kernel  # noqa: E402

COLS = 64


def one_kernel():
    affine = get_kernel("elementwise.cu", "affine")

    def f(x):
        x = cupy.ascontiguousarray(x)  # (the kernel reads x flat; under capture x is contiguous: no copy)
        out = cupy.empty_like(x)
        n = x.size
        affine((min(1024, (n + 255) // 256),), (256,), (x, out, np.int64(n), np.float32(1.5), np.float32(0.25)))
        return out

    return f


def jit(fn, **fields):
    fields.setdefault("capture_sizes", [4, 8])
    return cg.jit(fn, config=dict(backend="cupy", input_binding="auto", **fields))


def rand(rng, rows, cols=COLS):
    return cupy.asarray(rng.standard_normal((rows, cols)).astype(np.float32))


def check(g, f, x):
    poison_static_buffers(g, cupy)
    got = g(x)
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(f(x)))
    return got


def served(g) -> int:
    """Calls the compiled replay served, counted on the entries as every replay is (launches minus
    those of the Python path are not told apart there): the record's own count."""
    record = g.record
    return 0 if record is None else record.served


@pytest.fixture(autouse=True)
def _device():
    cupy.cuda.Device(0).use()


def test_the_extension_is_built_here():
    assert COMPILED, "cupygraph/backends/fastpath/_replay.c was not built: run `python setup.py build_ext --inplace`"


def test_steady_calls_are_served_compiled_and_equal_eager():
    rng = np.random.default_rng(1)
    f = one_kernel()
    g = jit(f)
    for _ in range(40):  # fresh arrays: freed ones come back at the same address, others do not
        check(g, f, rand(rng, 8))
    assert served(g) > 0  # (fresh arrays at an address no executable holds go through Python)
    stats = g.stats()
    assert stats.hits + stats.misses == 40 and stats.misses == 1, stats.to_dict()
    g.clear()
    assert g.record is None  # it described the entry's graphs: gone with them
    check(g, f, rand(rng, 8))  # captured again, served right


def test_a_caller_that_keeps_each_result_is_served_on_both_executables():
    rng = np.random.default_rng(2)
    f = one_kernel()
    g = jit(f)
    x = rand(rng, 8)
    last = None
    for _ in range(30):
        x[...] = rand(rng, 8)
        poison_static_buffers(g, cupy)
        result = g(x)
        assert last is None or result.data.ptr != last.data.ptr  # never the array the caller still holds
        np.testing.assert_array_equal(cupy.asnumpy(result), cupy.asnumpy(f(x)))
        last = result
    assert served(g) >= 20
    (entry,) = list(g.registry.entries())
    assert entry.binding.banks == 2


def test_results_all_kept_are_all_distinct_and_right():
    rng = np.random.default_rng(3)
    f = one_kernel()
    g = jit(f)
    xs = [rand(rng, 8) for _ in range(12)]
    kept = [g(x) for x in xs]
    assert len({int(r.data.ptr) for r in kept}) == len(kept)
    for x, r in zip(xs, kept):
        np.testing.assert_array_equal(cupy.asnumpy(r), cupy.asnumpy(f(x)))


def test_other_streams_padded_batches_and_views_are_served_right():
    rng = np.random.default_rng(4)
    f = one_kernel()
    g = jit(f)
    for _ in range(5):
        check(g, f, rand(rng, 8))
    before = served(g)
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        for _ in range(3):
            check(g, f, rand(rng, 8))
        side.synchronize()
    check(g, f, rand(rng, 5))  # padded: copied into the static buffer
    wide = rand(rng, 8, 2 * COLS)
    check(g, f, wide[:, :COLS])  # not contiguous: copied
    check(g, f, rand(rng, 9)[1:])  # contiguous at an offset
    for _ in range(5):
        check(g, f, rand(rng, 8))
    assert served(g) > before


def test_threads_calling_at_once_get_their_own_results():
    f = one_kernel()
    g = jit(f)
    g(rand(np.random.default_rng(0), 8))

    def worker(seed):
        cupy.cuda.Device(0).use()  # (a new thread's current device is the default one)
        rng = np.random.default_rng(seed)
        for _ in range(25):
            x = rand(rng, 8)
            got = g(x)
            np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(f(x)))

    errors = run_threads(worker, 4)
    assert not errors, errors[0]


def test_timed_replays_stay_on_the_python_path_and_are_timed():
    rng = np.random.default_rng(5)
    f = one_kernel()
    g = jit(f, time_replays=True)
    for _ in range(6):
        check(g, f, rand(rng, 8))
    assert g.record is None
    (entry,) = list(g.registry.entries())
    assert entry.replay_count >= 5 and entry.total_replay_s > 0


def test_a_chain_with_programmatic_edges_is_served_and_equal_eager():
    affine = get_kernel("elementwise.cu", "affine")
    squash = get_kernel("elementwise.cu", "squash")

    def f(x):
        x = cupy.ascontiguousarray(x)
        n = x.size
        grid = (min(1024, (n + 255) // 256),)
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        affine(grid, (256,), (x, a, np.int64(n), np.float32(1.5), np.float32(0.25)))
        squash(grid, (256,), (a, b, np.int64(n)))
        return b

    rng = np.random.default_rng(6)
    g = jit(f)
    x = rand(rng, 8)
    for _ in range(20):
        x[...] = rand(rng, 8)
        check(g, f, x)
    assert served(g) >= 15
    (entry,) = list(g.registry.entries())
    assert entry.recording.pdl is not None


def two_inputs():
    affine = get_kernel("elementwise.cu", "affine")

    def f(x, y):
        x = cupy.ascontiguousarray(x)
        a = cupy.empty_like(x)
        n = x.size
        affine((min(1024, (n + 255) // 256),), (256,), (x, a, np.int64(n), np.float32(1.5), np.float32(0.25)))
        return a * y

    return f


def test_two_arguments_are_served_in_either_order_and_twice_the_same():
    rng = np.random.default_rng(8)
    f = two_inputs()
    g = cg.jit(f, config=dict(backend="cupy", input_binding="auto", capture_sizes=[4, 8]), batch_argnums=(0, 1))
    x, y = rand(rng, 8), rand(rng, 8)
    for i in range(24):
        x[...], y[...] = rand(rng, 8), rand(rng, 8)
        a, b = (x, y) if i % 2 else (y, x)  # the addresses swap every call: the two executables take turns
        poison_static_buffers(g, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(g(a, b)), cupy.asnumpy(f(a, b)))
    assert served(g) >= 15
    for _ in range(6):  # the same array as both arguments
        x[...] = rand(rng, 8)
        poison_static_buffers(g, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(g(x, x)), cupy.asnumpy(f(x, x)))
    (entry,) = list(g.registry.entries())
    assert entry.binding.banks == 3  # one executable per address set: (x, y), (y, x) and (x, x)
