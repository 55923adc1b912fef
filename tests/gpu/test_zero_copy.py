"""Zero-copy arguments and outputs on a real GPU (``input_binding="auto"``): bit for bit equal to
eager, on fresh random data, with the static buffers poisoned before every call so a node left
pointing at them shows up as NaN."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers, replayed  # noqa: E402

from cupygraph.kernels import get_kernel  # noqa: E402
from cupygraph.pytree import flatten  # noqa: E402

COLS = 64  # 256 bytes a float32 row: contiguous row slices stay 256-byte aligned


def jit(fn, batch_argnums=(0,), constant_argnums=(), **fields):
    fields.setdefault("capture_sizes", [4, 8, 16])
    return cg.jit(fn, config=dict(backend="cupy", input_binding="auto", **fields), batch_argnums=batch_argnums,
                  constant_argnums=constant_argnums)


def rand(rng, rows, cols=COLS):
    return cupy.asarray(rng.standard_normal((rows, cols)).astype(np.float32))


def poison(graphed) -> None:
    poison_static_buffers(graphed, cupy)


def same(got, want) -> None:
    got_leaves, got_spec = flatten(got, lambda v: isinstance(v, cupy.ndarray))
    want_leaves, want_spec = flatten(want, lambda v: isinstance(v, cupy.ndarray))
    assert got_spec == want_spec and len(got_leaves) == len(want_leaves)  # no output missing or extra
    for g, w in zip(got_leaves, want_leaves):
        g, w = cupy.asnumpy(g), cupy.asnumpy(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def affine_pair():
    affine = get_kernel("elementwise.cu", "affine")
    squash = get_kernel("elementwise.cu", "squash")

    def f(x, y):
        n = x.size
        grid = (min(1024, (n + 255) // 256),)
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        affine(grid, (256,), (x, a, np.int64(n), np.float32(1.5), np.float32(0.25)))
        squash(grid, (256,), (a, b, np.int64(n)))
        return b * y + x

    return f


def test_exact_batches_bind_padded_batches_copy():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(1)
    f = affine_pair()
    g = jit(f, batch_argnums=(0, 1))
    for rows in (8, 5, 8, 16, 3, 4, 8, 13, 16):
        x, y = rand(rng, rows), rand(rng, rows)
        poison(g)
        same(g(x, y), f(x, y))
    counts = g.stats().to_dict()
    # The proof that the GPU binds at all: every exact batch that replayed (8, 4, 8, 16) bound both
    # arguments and the output. The calls that captured (8, 16, 3) and the first padded calls of keys
    # captured at their exact size (5, 13) ran the function as it is.
    assert counts["rebinds_by_argument"] == {"argument 0": 4, "argument 1": 4, "output 0": 4}, counts
    assert counts["copies_by_argument"] == {}


def test_in_place_and_same_array_twice():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(2)

    def f(a, b):
        a *= 2
        return a + b

    g = jit(f, batch_argnums=(0, 1))
    for rows in (8, 8, 6, 16):
        x = rand(rng, rows)
        want_x = x.copy()
        want = f(want_x, want_x)
        poison(g)
        same(g(x, x), want)
        same(x, want_x)
        y, z = rand(rng, rows), rand(rng, rows)
        want_y = y.copy()
        want = f(want_y, z)
        poison(g)
        same(g(y, z), want)
        same(y, want_y)


def test_output_that_is_an_input():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(3)

    def f(x):
        x += 1
        return x

    g = jit(f)
    for i, rows in enumerate((8, 8, 8, 5, 5)):
        x = rand(rng, rows)
        want_x = x.copy()
        want = f(want_x)
        poison(g)
        got = g(x)
        same(got, want)
        same(x, want_x)
        # The call that captures, and the key's first padded call, run f as it is (f returns x itself); a
        # replay returns an output the caller owns.
        assert (got.data.ptr == x.data.ptr) == (i in (0, 3))


def test_views_offsets_and_non_contiguous():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(4)

    def f(x, y):  # stride-aware ops only: a RawKernel reads a strided view's raw memory, eagerly too
        return cupy.tanh(x) * y + x

    g = jit(f, batch_argnums=(0, 1))
    base = rand(rng, 40, 2 * COLS)
    views = [
        base[8:16, :COLS],       # non-contiguous (row stride 2 * COLS)
        base[::5, COLS:],        # strided rows
        cupy.ascontiguousarray(base[:8, :COLS]),
        base.reshape(-1)[1:1 + 8 * COLS].reshape(8, COLS),  # contiguous, 4 bytes off alignment
        base[:16].reshape(32, COLS)[8:16],  # contiguous and aligned: bound
        cupy.asfortranarray(base[:8, :COLS]),
    ]
    for view in views:
        other = rand(rng, view.shape[0])
        poison(g)
        same(g(view, other), f(view, other))
    counts = g.stats().to_dict()
    # The first view's call captured (it ran f as it is); of the five replays, three views are copied.
    assert counts["copies_by_argument"]["argument 0"] == 3, counts
    assert counts["rebinds_by_argument"]["argument 0"] == 2, counts


def test_freed_and_reallocated_at_the_same_address():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(5)
    f = affine_pair()
    g = jit(f, batch_argnums=(0, 1))
    seen = set()
    for _ in range(6):
        x, y = rand(rng, 8), rand(rng, 8)
        seen.add(x.data.ptr)
        poison(g)
        same(g(x, y), f(x, y))
        del x, y
    assert len(seen) < 6  # the pool handed an address out again: the skipped re-point is still right


def test_threads():
    cupy.cuda.Device(0).use()
    f = affine_pair()
    g = jit(f, batch_argnums=(0, 1))
    errors = []

    def worker(seed):
        try:
            with cupy.cuda.Device(0), cupy.cuda.Stream(non_blocking=True):
                rng = np.random.default_rng(seed)
                for i in range(40):
                    rows = (8, 16, 5)[i % 3]
                    x, y = rand(rng, rows), rand(rng, rows)
                    got, want = g(x, y), f(x, y)
                    same(got, want)
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_pool_reuse_across_captures_and_eviction():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(6)

    def f(x):
        t = x * 3
        u = cupy.tanh(t) + x
        return u * u, t[:, :4].copy()

    g = jit(f, max_cached_graphs=2)
    for rows in (16, 8, 4, 16, 8, 4, 3, 16, 9):
        x = rand(rng, rows)
        poison(g)
        same(g(x), f(x))
    assert g.stats().evictions > 0


def test_outputs_sharing_an_allocation_are_copied():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(7)

    def f(x):
        y = x * 2
        return y[:, :8], y[:, 8:]

    g = jit(f)
    for rows in (8, 8):
        x = rand(rng, rows)
        poison(g)
        same(g(x), f(x))


def test_returned_outputs_are_owned():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(8)
    g = jit(lambda x: x * 2 + 1)
    x1, x2 = rand(rng, 8), rand(rng, 8)
    a = g(x1)
    b = g(x2)
    assert a.data.ptr != b.data.ptr
    same(a, x1 * 2 + 1)
    same(b, x2 * 2 + 1)


def test_piecewise_binds_what_no_eager_step_touches():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(9)
    w = rand(rng, COLS)
    matmul = cg.graph_break(cupy.matmul)

    def f(x, w):
        h = cupy.tanh(x * 2)
        return matmul(h, w) + 1

    def g_direct(x, w):
        return matmul(x, w) * 2  # the eager step reads the input itself: it must be copied

    def padded_eager(fn, x, w):
        """``fn`` on ``x`` padded with zero rows to its capture size (4, 8 or 16): what a replay equals bit
        for bit; cuBLAS may pick another GEMM algorithm for the unpadded row count (RELIABILITY.md, 1)."""
        size = next(s for s in (4, 8, 16) if s >= x.shape[0])
        padded = cupy.zeros((size, *x.shape[1:]), x.dtype)
        padded[: x.shape[0]] = x
        return fn(padded, w)[: x.shape[0]]

    g = jit(f, mode="PIECEWISE", constant_argnums=(1,))
    d = jit(g_direct, mode="PIECEWISE", constant_argnums=(1,))
    for rows in (8, 5, 16, 8):
        x = rand(rng, rows)
        poison(g)
        poison(d)
        for graphed, fn in ((g, f), (d, g_direct)):
            got, replay = replayed(graphed, x, w)  # a call that ran fn as it is rounds as fn at its rows
            same(got, padded_eager(fn, x, w) if replay else fn(x, w))
    counts = g.stats().to_dict()["rebinds_by_argument"]
    # The last 8 replays, bound; the calls that captured (8, 16) and the first padded one (5) ran f as it is.
    assert counts.get("argument 0") == 1 and counts.get("output 0") == 1, counts
    assert d.stats().to_dict()["rebinds_by_argument"].get("argument 0", 0) == 0


def test_adjacent_pool_blocks_still_bind():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(10)

    def f(x):  # small buffers: the static input and the intermediates sit back to back in the pool
        return x * 2 + 1

    g = jit(f, capture_sizes=[1])
    for _ in range(3):
        x = rand(rng, 1)
        poison(g)
        same(g(x), f(x))
    # The call that captured ran f as it is; the two replays bound.
    assert g.stats().to_dict()["rebinds_by_argument"] == {"argument 0": 2, "output 0": 2}


def test_outputs_are_taken_again_only_once_let_go():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(11)
    g = jit(lambda x: x * 2 + 1, capture_sizes=[8])
    x = rand(rng, 8)
    kept = [g(x + i) for i in range(4)]
    assert len({a.data.ptr for a in kept}) == 4
    for i, a in enumerate(kept):
        same(a, (x + i) * 2 + 1)
    dropped = g(x).data.ptr  # the result dies at once
    again = g(x + 1)
    assert again.data.ptr == dropped
    view = again[1:]
    del again
    other = g(x + 2)
    assert other.data.ptr != dropped  # a view still holds it
    same(view, ((x + 1) * 2 + 1)[1:])
    same(other, (x + 2) * 2 + 1)
    for i, a in enumerate(kept):
        same(a, (x + i) * 2 + 1)


def test_new_weights_are_rebound_not_recaptured():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(12)
    affine = get_kernel("elementwise.cu", "affine")

    def f(x, w):
        out = cupy.empty_like(x)
        n = x.size
        affine((min(1024, (n + 255) // 256),), (256,), (x * w, out, np.int64(n), np.float32(1.5), np.float32(0.5)))
        return out + w

    g = jit(f, constant_argnums=(1,))
    weights = [cupy.asarray(rng.standard_normal(COLS).astype(np.float32)) for _ in range(3)]
    for i in range(9):
        x, w = rand(rng, (8, 16, 5)[i % 3]), weights[i % 3]
        poison(g)
        same(g(x, w), f(x, w))
    stats = g.stats()
    # One per size (5 rows pad to 8); every other weight is bound to the graph of its size.
    assert stats.captures == 2 and sum(stats.recaptures_by_reason.values()) == 0, stats
    unaligned = cupy.asarray(rng.standard_normal(COLS + 1).astype(np.float32))[1:]
    x = rand(rng, 8)
    same(g(x, unaligned), f(x, unaligned))
    assert g.stats().captures == 3  # 4 bytes off alignment: captured again, never bound


def test_alternating_addresses_take_turns_on_two_executables():
    """``y = f(x)`` in a loop keeps one result while the next is made, so the output's address
    alternates; so do two inputs used in turn. A second executable takes the other address: after
    the first few calls no node is re-pointed, and every result is the eager one, at every padding
    and every return to a static buffer in between."""
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(13)
    f = affine_pair()
    g = jit(f, capture_sizes=[8])
    xs = [rand(rng, 8) for _ in range(2)]
    ys = [rand(rng, 8) for _ in range(2)]
    out = None
    for i in range(6):
        poison(g)
        out = g(xs[i % 2], ys[i % 2])
        same(out, f(xs[i % 2], ys[i % 2]))
    (entry,) = list(g.registry.entries())
    binder = entry.binding
    assert binder.banks == 2
    settled = binder.node_updates
    assert settled > 0  # the second executable was pointed at the caller's arrays once
    for i in range(20):
        poison(g)
        out = g(xs[i % 2], ys[i % 2])
        same(out, f(xs[i % 2], ys[i % 2]))
    assert binder.node_updates == settled  # each executable already held its call's addresses
    x5, y5 = rand(rng, 5), rand(rng, 5)
    poison(g)
    same(g(x5, y5), f(x5, y5))  # padded: back on the static buffers, on whichever executable
    for _ in range(4):
        fresh_x, fresh_y = rand(rng, 8), rand(rng, 8)
        poison(g)
        out = g(fresh_x, fresh_y)
        same(out, f(fresh_x, fresh_y))
    del out
    g.clear()
