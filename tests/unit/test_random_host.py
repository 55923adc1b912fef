"""cupygraph.random on the host backend: the contract the GPU's device-state generator keeps (issue 13).

Draws are fresh at every replay and reproducible from the seed; shapes and dtypes follow NumPy's
Generator (``size=None`` gives a 0-d array, as on the GPU); draws inside a ``while_loop`` body
advance per iteration; a capture run hands back guarded arrays (a host read of a draw is refused
there, as on the GPU); the distributions pass moment and Kolmogorov-Smirnov checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from repo_files import load_example

import cupygraph as cg

HOST = {"backend": "host", "mode": "FULL", "max_capture_size": 16}


def ks_statistic(sample: np.ndarray, cdf) -> float:
    """sup |F_n - F| of a sample against a continuous cdf."""
    x = np.sort(sample.astype(np.float64))
    f = cdf(x)
    n = x.size
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


KS_LIMIT = 1.95  # times 1/sqrt(n): the 0.1 % critical value of the KS statistic


def make_noisy(rng):
    def noisy(x):
        return x + rng.standard_normal(x.shape, dtype=np.float32)

    return noisy


def test_two_generators_with_one_seed_agree_across_replays_and_replays_differ():
    a = cg.jit(make_noisy(cg.random.default_rng(11, backend="host")), config=HOST)
    b = cg.jit(make_noisy(cg.random.default_rng(11, backend="host")), config=HOST)
    x = np.ones((5, 3), np.float32)
    outs = []
    for _ in range(6):
        ya, yb = a(x), b(x)
        np.testing.assert_array_equal(ya, yb)
        outs.append(ya)
    assert all(not np.array_equal(outs[i], outs[i + 1]) for i in range(len(outs) - 1)), "every replay draws anew"
    assert a.stats().hits >= 4 and a.stats().fallbacks == 0
    other = cg.jit(make_noisy(cg.random.default_rng(12, backend="host")), config=HOST)
    assert not np.array_equal(other(x), a(x))


def test_draws_follow_numpy_shapes_and_dtypes():
    rng = cg.random.default_rng(0, backend="host")
    assert rng.backend == "host" and "host" in repr(rng)
    for method in (rng.random, rng.standard_normal):
        for dtype in (np.float32, np.float64):
            value = method((2, 3), dtype=dtype)
            assert value.shape == (2, 3) and value.dtype == dtype
        scalar = method()
        assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar.dtype == np.float64
    assert rng.normal(1.0, 2.0, size=7, dtype=np.float32).shape == (7,)
    assert rng.normal(np.zeros(4), 1.0).shape == (4,)  # size=None: the broadcast shape of loc and scale
    uniform = rng.uniform(-2.0, 3.0, size=10_000)
    assert uniform.min() >= -2.0 and uniform.max() < 3.0
    ints = rng.integers(5, 9, size=(100,), dtype=np.int16)
    assert ints.dtype == np.int16 and ints.min() >= 5 and ints.max() <= 8 and set(ints.tolist()) == {5, 6, 7, 8}
    closed = rng.integers(3, size=1000, endpoint=True)
    assert closed.dtype == np.int64 and set(closed.tolist()) == {0, 1, 2, 3}
    out = np.full((4, 4), np.nan, np.float32)
    assert rng.random(dtype=np.float32, out=out) is out and np.all((out >= 0) & (out < 1))
    assert rng.standard_normal(dtype=np.float32, out=out) is out and np.isfinite(out).all()


def test_same_seed_same_sequence_eagerly():
    a, b = cg.random.default_rng(5, backend="host"), cg.random.default_rng(5, backend="host")
    for draw in ("random", "standard_normal"):
        np.testing.assert_array_equal(getattr(a, draw)(9), getattr(b, draw)(9))
    np.testing.assert_array_equal(a.integers(0, 100, 9), b.integers(0, 100, 9))
    np.testing.assert_array_equal(a.normal(2, 3, 9), b.normal(2, 3, 9))
    assert not np.array_equal(a.random(9), a.random(9))


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda r: r.random(3, dtype=np.int32), TypeError, "random supports float32 and float64"),
    (lambda r: r.standard_normal(3, dtype=np.float16), TypeError, "standard_normal supports float32"),
    (lambda r: r.integers(0, 5, dtype=np.float32), TypeError, "integer dtype"),
    (lambda r: r.integers(np.array([1, 2]), 5), TypeError, "Python ints for low"),
    (lambda r: r.integers(0, 2.5), TypeError, "Python ints for high"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call(cg.random.default_rng(0, backend="host"))


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown backend 'gpu'; valid: auto, cupy, host"):
        cg.random.default_rng(0, backend="gpu")


def test_auto_backend_follows_gpu_availability():
    expected = "cupy" if cg.gpu_available() else "host"
    assert cg.random.default_rng(0).backend == expected


def test_draws_in_a_host_capture_stay_guarded():
    rng = cg.random.default_rng(3, backend="host")

    def reads_a_draw(x):
        return x * float(rng.random(()))  # a device-to-host read of a draw: the GPU refuses it

    graphed = cg.jit(reads_a_draw, config=HOST)
    graphed(np.ones((2, 2), np.float32))
    assert graphed.stats().fallbacks == 1 and "float()" in graphed.stats().detail("device_to_host_read")


def test_while_loop_body_draws_anew_each_iteration():
    rng = cg.random.default_rng(21, backend="host")
    twin = cg.random.default_rng(21, backend="host")

    def accumulate(x):
        total = np.zeros_like(x)
        count = np.zeros(1, np.int32)

        def body():
            total[...] += rng.random(x.shape, dtype=np.float32)
            count[...] += 1

        cg.while_loop(lambda: count < 3, body)
        return total

    x = np.zeros((2, 3), np.float32)
    got = accumulate(x)
    want = sum(twin.random(x.shape, dtype=np.float32) for _ in range(3))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    graphed = cg.jit(accumulate, config=HOST)
    first, second = graphed(x), graphed(x)
    assert not np.array_equal(first, second) and graphed.stats().fallbacks == 0


def test_moments_and_ks_on_a_million_draws():
    rng = cg.random.default_rng(2024, backend="host")
    n = 1_000_000
    u = rng.random(n, dtype=np.float64)
    z = rng.standard_normal(n, dtype=np.float32)
    assert abs(u.mean() - 0.5) < 5 / math.sqrt(12 * n) and abs(u.var() - 1 / 12) < 1e-3
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.var() - 1.0) < 5e-3
    assert ks_statistic(u, lambda x: x) < KS_LIMIT / math.sqrt(n)
    assert ks_statistic(z[:200_000], normal_cdf) < KS_LIMIT / math.sqrt(200_000)


def test_ks_statistic_catches_a_wrong_distribution():
    """The check above can fail: a shifted uniform is far over the limit."""
    sample = np.random.default_rng(1).random(100_000) * 0.98
    assert ks_statistic(sample, lambda x: x) > KS_LIMIT / math.sqrt(100_000)


def test_monte_carlo_example_runs_on_the_host_backend():
    module = load_example("monte_carlo")
    result = module.main(["--calls", "12", "--paths", "20000", "--max-batch", "8", "--backend", "host"])
    assert result["fallbacks"] == 0 and result["hits"] >= 1
    assert result["reproduced"] and result["fresh"] and result["worst_z"] < 5.0


@pytest.mark.parametrize("method", ["normal", "uniform"])
def test_a_size_smaller_than_the_parameters_is_refused_not_drawn_once_and_reused(method):
    # size (3,) against parameters of shape (2, 3) would draw 3 numbers and reuse them on both rows
    rng = cg.random.default_rng(0, backend="host")
    draw = getattr(rng, method)
    with pytest.raises(ValueError, match=rf"{method} got size=\(3,\) but its parameters broadcast to \(2, 3\)"):
        draw(np.zeros((2, 3)), np.ones(3), size=(3,))
    with pytest.raises(ValueError, match="size must be that shape"):
        draw(np.zeros(3), 1.0, size=4)
    assert draw(np.zeros(3), np.ones(3), size=(2, 3)).shape == (2, 3)  # a size the parameters broadcast to
    rows = draw(np.zeros((2, 3)), np.ones(3), size=(2, 3))
    assert not np.array_equal(rows[0], rows[1])
