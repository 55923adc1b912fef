"""The first call of a key behaves as the plain function on a real GPU (issue 27).

The call that captures a key runs the function as it is; a write it made into an array the
function reads by address (told by a hash on the device, no copy) makes the capture skip its
warm-ups; legacy ``cupy.random``, routing off, is refused in the warm-ups before it draws; the first padded call
shows which outputs carry the batch on their leading axis; and the README's table of how many times
each call runs the function holds for the GPU. Bit for bit against the plain function on fresh data.
The host variants are ``tests/unit/test_first_call.py`` and ``tests/unit/test_execution_counts.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from repo_files import documented_runs  # noqa: E402
from run_counts import measured_runs  # noqa: E402

from cupygraph.backends.cupy.fingerprint import fingerprint  # noqa: E402

CFG = dict(backend="cupy", capture_sizes=[4, 8])


@pytest.fixture(autouse=True)
def _device():
    with cupy.cuda.Device(0):
        yield


def rand(rows, cols=64, seed=0):
    return cupy.asarray(np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32))


def same(got, want):
    got, want = cupy.asnumpy(got), cupy.asnumpy(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("num_warmups", [0, 1, 2])
def test_the_documented_runs_per_call_are_the_gpu_backends(num_warmups):
    documented = {row: count(num_warmups) for row, count in documented_runs("GPU").items()}
    assert measured_runs(cupy, "cupy", num_warmups) == documented


def test_a_fingerprint_tells_any_changed_byte_and_copies_nothing():
    a = cupy.arange(4096, dtype=cupy.float32)
    seen = fingerprint(a)
    assert fingerprint(a) == seen
    a[2048] += 1
    assert fingerprint(a) != seen
    b = cupy.arange(4096, dtype=cupy.float32)
    assert fingerprint(b[::-1].copy()) != fingerprint(b)  # a permutation changes it
    odd = cupy.zeros(4099, dtype=cupy.uint8)[3:]  # an unaligned span: the byte kernel
    before = fingerprint(odd)
    odd[-1] = 1
    assert fingerprint(odd) != before
    strided = cupy.zeros((64, 64), dtype=cupy.float32)[::2, ::3]
    before = fingerprint(strided)
    strided[5, 7] = 2.0
    assert fingerprint(strided) != before
    big = cupy.zeros(64 * 2**20, dtype=cupy.float32)  # 256 MiB
    pool = cupy.get_default_memory_pool()
    held = pool.total_bytes()
    fingerprint(big)
    assert pool.total_bytes() - held < 2**20  # a hash, not a copy


def bump(x, w):
    w += 1  # a constant argument, written in place
    return cupy.tanh(x) * w


@pytest.mark.parametrize("num_warmups", [0, 1, 2])
@pytest.mark.parametrize("rows", [4, 3])
def test_a_write_into_a_constant_happens_once_per_call(num_warmups, rows):
    f = cg.jit(bump, config=dict(CFG, num_warmups=num_warmups), constant_argnums=(1,))
    w, w_plain = cupy.zeros(64, cupy.float32), cupy.zeros(64, cupy.float32)
    for call in range(4):
        x = rand(rows, seed=call)
        same(f(x, w), bump(x, w_plain))
        same(w, w_plain)  # w == call + 1, as without jit
    stats = f.stats()
    assert stats.captures == 1 and stats.hits == 3 and stats.fallbacks == 0, stats.to_dict()


def test_a_write_into_a_closure_array_happens_once_per_call():
    hits = cupy.zeros(1, cupy.float32)

    def counted(x):
        hits[...] += 1  # reached through the closure, written by address
        return x + hits

    f = cg.jit(counted, config=dict(CFG, num_warmups=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)
        for call in range(1, 4):
            same(f(rand(3)), rand(3) + call)
            assert float(hits[0]) == call
    assert f.stats().hits == 2


def test_a_large_constant_written_in_place_is_told_without_a_copy():
    w = cupy.zeros(64 * 2**20, dtype=cupy.float32)  # 256 MiB of "weights" the function updates

    def step(x, w):
        w += 1
        return x * w[: x.shape[1]]

    f = cg.jit(step, config=CFG, constant_argnums=(1,))
    pool = cupy.get_default_memory_pool()
    held = pool.total_bytes()
    same(f(rand(3), w), rand(3))
    assert pool.total_bytes() - held < w.nbytes // 4  # no copy of w was made
    same(f(rand(3), w), rand(3) * 2)
    assert float(w[0]) == 2.0 and f.stats().hits == 1


@pytest.mark.parametrize("fn, shape", [
    (lambda x: x.T, [64, 3]),
    (lambda x: cupy.concatenate([x, x]), [6, 64]),
    (lambda x: x.reshape(-1), [192]),
], ids=["transpose", "concatenate", "reshape"])
def test_an_output_whose_batch_axis_is_not_leading_makes_padded_calls_run_eagerly(fn, shape):
    f = cg.jit(fn, config=CFG)
    for call in range(3):
        x = rand(3, seed=call)
        got = f(x)
        assert list(got.shape) == shape
        same(got, fn(x))
    x = rand(4, seed=9)
    same(f(x), fn(x))  # a capture size: the graph replays
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"batch_axis_not_leading": 3} and stats.hits == 1
    assert f"has shape {shape} at the real batch of 3 rows" in stats.detail("batch_axis_not_leading")


def test_unbatched_outputs_as_long_as_the_padded_batch_are_not_cut():
    fn = lambda x: (x.max(axis=0), x * 2)
    f = cg.jit(fn, config=CFG)
    for call in range(3):
        x = rand(5, cols=8, seed=call)  # pads to 8 rows: the column maxima are 8 long too
        top, doubled = f(x)
        assert top.shape == (8,) and doubled.shape == (5, 8)
        same(doubled, x * 2)
    assert f.stats().hits == 2


def legacy_noise(x):
    return x + cupy.random.standard_normal(x.shape, dtype=x.dtype)


def legacy_counts(x):  # a legacy distribution with a host-kept seed: a graph would freeze its draws
    return x + cupy.random.binomial(10, 0.5, size=x.shape).astype(x.dtype)


@pytest.mark.parametrize("fn", [legacy_noise, legacy_counts])
@pytest.mark.parametrize("num_warmups", [0, 1, 2])
@pytest.mark.parametrize("rows", [4, 3])
def test_legacy_cupy_random_draws_what_the_plain_calls_draw(fn, num_warmups, rows):
    previous = cupy.random.get_random_state()
    try:
        cupy.random.set_random_state(cupy.random.RandomState(7))
        plain = [cupy.asnumpy(fn(rand(rows, seed=i))) for i in range(3)]
        plain_next = cupy.asnumpy(cupy.random.random(16))
        # Routing off: the legacy draws are refused (routed draws: tests/gpu/test_routes_random_gpu.py).
        f = cg.jit(fn, config=dict(CFG, num_warmups=num_warmups, route_library_calls=False))
        cupy.random.set_random_state(cupy.random.RandomState(7))
        graphed = [cupy.asnumpy(f(rand(rows, seed=i))) for i in range(3)]
        graphed_next = cupy.asnumpy(cupy.random.random(16))
    finally:
        cupy.random.set_random_state(previous)
    for got, want in zip(graphed, plain):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(graphed_next, plain_next)  # nothing else was drawn
    assert f.stats().fallbacks_by_reason == {"library_call": 3}, f.stats().to_dict()
    assert "cupy.random." in f.stats().detail("library_call")


def test_cupygraph_random_draws_what_plain_calls_draw():
    rng, twin = cg.random.default_rng(11), cg.random.default_rng(11)

    def noisy(x):
        return x + rng.standard_normal(x.shape, dtype=np.float32)

    f = cg.jit(noisy, config=dict(CFG, num_warmups=2))
    for rows in (4, 4, 8, 4):  # capture sizes (a padded replay draws for its padding rows too)
        x = rand(rows)
        same(f(x), x + twin.standard_normal(x.shape, dtype=np.float32))
    assert f.stats().hits == 2 and f.stats().fallbacks == 0
