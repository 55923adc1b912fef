"""cupygraph.random inside FULL graphs on a real GPU: state on the device, advanced by every replay (issue 13)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from repo_files import load_example

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

FULL = {"mode": "FULL", "max_capture_size": 64}
KS_LIMIT = 1.95  # times 1/sqrt(n): the 0.1 % critical value of the KS statistic


def ks_statistic(sample, cdf):
    x = np.sort(np.asarray(sample, dtype=np.float64))
    f = cdf(x)
    n = x.size
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def normal_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def noisy_fn(rng, dtype=np.float32):
    def noisy(x):
        return x + rng.standard_normal(x.shape, dtype=dtype)

    return noisy


def test_replays_continue_the_eager_stream_exactly():
    """Call k draws what the k-th eager call draws: the call that captures runs the function as it is,
    the warm-up's draw is given back, and each replay advances the state on the device."""
    rng, twin = cg.random.default_rng(7), cg.random.default_rng(7)
    assert rng.backend == "cupy"
    graphed = cg.jit(noisy_fn(rng), config=FULL)
    x = cupy.zeros((16, 33), np.float32)
    outs = []
    for _ in range(5):
        got = cupy.asnumpy(graphed(x))
        np.testing.assert_array_equal(got, cupy.asnumpy(twin.standard_normal((16, 33), dtype=np.float32)))
        outs.append(got)
    assert all(not np.array_equal(outs[i], outs[i + 1]) for i in range(4)), "every replay draws anew"
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits == 4 and stats.captures == 1


def test_two_generators_with_one_seed_agree_across_padded_replays():
    a = cg.jit(noisy_fn(cg.random.default_rng(11), np.float64), config=FULL)
    b = cg.jit(noisy_fn(cg.random.default_rng(11), np.float64), config=FULL)
    sizes = np.random.default_rng(0).integers(1, 65, size=20).tolist()
    previous = None
    for n in sizes:
        x = cupy.asarray(np.random.default_rng(n).standard_normal((n, 9)))
        ya, yb = cupy.asnumpy(a(x)), cupy.asnumpy(b(x))
        np.testing.assert_array_equal(ya, yb)
        if previous is not None and previous.shape == ya.shape:
            assert not np.array_equal(previous, ya)
        previous = ya
    assert a.stats().fallbacks == 0 and a.stats().hits >= 5


def test_moments_and_ks_on_a_million_replayed_draws():
    rng = cg.random.default_rng(2024)

    def draws(x):
        return (rng.random((x.shape[0], 1000), dtype=np.float64), rng.standard_normal((x.shape[0], 1000)),
                rng.random((x.shape[0], 1000), dtype=np.float32), rng.normal(2.0, 3.0, (x.shape[0], 1000)),
                rng.uniform(-1.0, 5.0, (x.shape[0], 1000)), rng.integers(0, 10, (x.shape[0], 1000), dtype=np.int32))

    graphed = cg.jit(draws, config={"mode": "FULL", "max_capture_size": 1024})
    x = cupy.zeros((1000, 1), np.float32)
    first = [cupy.asnumpy(v).ravel() for v in graphed(x)]
    second = [cupy.asnumpy(v).ravel() for v in graphed(x)]
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits == 1
    for a, b in zip(first, second):
        assert a.size == 1_000_000 and not np.array_equal(a, b)
    u64, z, u32, normal, uniform, ints = first
    n = u64.size
    assert u32.dtype == np.float32 and ints.dtype == np.int32
    assert abs(u64.mean() - 0.5) < 5 / math.sqrt(12 * n) and abs(u64.var() - 1 / 12) < 1e-3
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.var() - 1) < 5e-3
    assert abs(normal.mean() - 2.0) < 15 / math.sqrt(n) and abs(normal.std() - 3.0) < 1e-2
    assert uniform.min() >= -1.0 and uniform.max() < 5.0 and abs(uniform.mean() - 2.0) < 0.02
    assert ints.min() == 0 and ints.max() == 9 and np.all(np.abs(np.bincount(ints) / n - 0.1) < 0.003)
    for sample in (u64, u32, second[0]):
        assert ks_statistic(sample, lambda v: v) < KS_LIMIT / math.sqrt(n)
    assert ks_statistic(z[:200_000], normal_cdf) < KS_LIMIT / math.sqrt(200_000)


def test_while_loop_body_draws_anew_each_iteration():
    if cg.control_flow.conditional_nodes_unavailable_reason() is not None:
        pytest.skip(cg.control_flow.conditional_nodes_unavailable_reason())
    rng, twin = cg.random.default_rng(21), cg.random.default_rng(21)

    def accumulate(x):
        total = cupy.zeros_like(x)
        count = cupy.zeros(1, np.int32)

        def body():
            total[...] += rng.random(x.shape, dtype=np.float32)
            count[...] += 1

        cg.while_loop(lambda: count < 3, body)
        return total

    graphed = cg.jit(accumulate, config=FULL)
    x = cupy.zeros((8, 5), np.float32)

    def twin_call():
        total = cupy.zeros_like(x)
        for _ in range(3):
            total += twin.random(x.shape, dtype=np.float32)
        return total

    for _ in range(3):  # the call that captures draws as eagerly; its warm-up's draws are given back
        np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(twin_call()))
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits == 2


def test_the_graph_holds_the_generator_state():
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.ForeignMemoryWarning)  # the state is held, not foreign
        rng = cg.random.default_rng(3)
        graphed = cg.jit(noisy_fn(rng), config=FULL)
        x = cupy.zeros((4, 4), np.float32)
        graphed(x)
        graphed(x)
    (entry,) = graphed.registry.entries()
    assert any(item is rng for item in entry.cudagraph.held)
    audit = entry.cudagraph.audit
    assert audit is None or (not audit.foreign() and audit.owners().get("held", 0) >= 1)


def test_a_generator_made_inside_the_function_is_reseeded_by_every_replay():
    def fresh(x):
        return x + cg.random.default_rng(5).random(x.shape, dtype=np.float32)

    graphed = cg.jit(fresh, config=FULL)
    x = cupy.zeros((4, 4), np.float32)
    first, second = cupy.asnumpy(graphed(x)), cupy.asnumpy(graphed(x))
    np.testing.assert_array_equal(first, second)  # as NumPy: a new generator per call, the same seed
    np.testing.assert_array_equal(first, cupy.asnumpy(fresh(x)))


def test_a_draw_on_another_device_is_refused():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        rng = cg.random.default_rng(0)
        rng.device_id = rng.device_id + 1  # stands in for a generator made on another device
    else:
        with cupy.cuda.Device(1):
            rng = cg.random.default_rng(0)
    with pytest.raises(ValueError, match="state lives on cuda:1 but the current device is cuda:0"):
        rng.random(3)


def test_monte_carlo_example_on_the_gpu():

    module = load_example("monte_carlo")
    result = module.main(["--calls", "20", "--paths", "100000", "--backend", "cupy"])
    assert result["fallbacks"] == 0 and result["reproduced"] and result["fresh"] and result["worst_z"] < 5.0
