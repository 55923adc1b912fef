"""Legacy ``cupy.random`` draws captured unchanged (issue 29): routed to a device-state generator of the recording.

Each function below is plain CuPy drawing from CuPy's global generator. Under ``jit`` it must capture
(no fallback) with the draws in the statistics, every replay must draw fresh numbers (never a frozen
constant), a program seeded with ``cupy.random.seed(s)`` must replay the same numbers with a fresh
``jit`` (and another seed others), the call that captures must draw what the plain call draws, and
what is not routed must still fall back naming the line. The host twin is
``tests/unit/test_routes_random_host.py``. Every test leaves CuPy's global generator as it found it.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

bound_early = cupy.random.standard_normal  # a name this module bound before any capture

CONFIG = {"mode": "FULL", "capture_sizes": [4, 8]}


@pytest.fixture(autouse=True)
def global_state_kept():
    """Each test gets a RandomState of its own (``seed`` changes the one in place): the previous one is
    put back untouched."""
    previous = cupy.random.get_random_state()
    cupy.random.set_random_state(cupy.random.RandomState(0))
    yield
    cupy.random.set_random_state(previous)


def noisy(x):
    a = cupy.random.rand(*x.shape, dtype=x.dtype)
    b = cupy.random.normal(1.0, 2.0, size=x.shape, dtype=x.dtype)
    c = cupy.random.randint(0, 1000, size=x.shape[0])
    d = cupy.random.choice(50, size=3, replace=False)
    e = cupy.arange(12.0)
    cupy.random.shuffle(e)
    return x + a + b, c, d, e


def calls(graphed, x, n):
    """n calls' outputs, on the host."""
    return [tuple(cupy.asnumpy(leaf) for leaf in graphed(x)) for _ in range(n)]


def ones(rows=8):
    return cupy.ones((rows, 3), dtype=cupy.float32)


def test_unchanged_legacy_draws_capture_and_every_replay_draws_fresh_numbers():
    cupy.random.seed(5)
    graphed = cg.jit(noisy, config=CONFIG)
    outs = calls(graphed, ones(), 5)
    stats = graphed.stats()
    assert stats.fallbacks == 0, stats.to_dict()["last_detail_by_reason"]
    assert graphed.registry.num_graphs() == 1 and stats.replays == 4
    assert len(stats.routed_calls) == 5, stats.routed_calls  # one label per routed line
    assert all(label.startswith("cuRAND (at test_routes_random_gpu.py:") for label in stats.routed_calls)
    for earlier, later in itertools.pairwise(outs):
        for old, new in zip(earlier, later):
            assert not np.array_equal(old, new)  # never a frozen constant
    for total, ints, picked, shuffled in outs:
        assert total.shape == (8, 3) and total.dtype == np.float32 and np.isfinite(total).all()
        assert ints.dtype == np.int64 and ((0 <= ints) & (ints < 1000)).all()
        assert len(set(picked.tolist())) == 3 and ((0 <= picked) & (picked < 50)).all()
        np.testing.assert_array_equal(np.sort(shuffled), np.arange(12.0))


def test_a_seeded_program_replays_the_same_draws_and_another_seed_others():
    def run(seed):
        cupy.random.seed(seed)
        return calls(cg.jit(noisy, config=CONFIG), ones(4), 4)  # a fresh jit'd copy each time

    first, again, other = run(11), run(11), run(12)
    for a, b in zip(first, again):
        assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not np.array_equal(first[2][0], other[2][0])


def test_the_call_that_captures_draws_what_the_plain_call_draws_and_the_replays_no_curand_numbers():
    x = cupy.zeros((8, 3), dtype=cupy.float32)
    cupy.random.seed(21)
    plain = [cupy.asnumpy(leaf) for leaf in noisy(x)]
    plain_next = cupy.asnumpy(cupy.random.random(16))
    cupy.random.seed(21)
    graphed = cg.jit(noisy, config=CONFIG)
    got = [cupy.asnumpy(leaf) for leaf in graphed(x)]
    graphed(x)
    graphed(x)
    graphed_next = cupy.asnumpy(cupy.random.random(16))
    assert graphed.registry.num_graphs() == 1 and graphed.stats().replays == 2
    assert all(np.array_equal(g, p) for g, p in zip(got, plain))
    np.testing.assert_array_equal(graphed_next, plain_next)  # cuRAND's stream was not drawn from


def test_warmup_and_its_replays_draw_nothing_from_curands_stream():
    """The host twin (test_routes_random_host.py) moves NumPy's one legacy stream by a seed per size; on
    the GPU the seeds come from CuPy's kernel seed, so warmup() and the replays leave cuRAND's stream
    where it was, and a key's first padded call runs eagerly, drawing what the plain call draws."""
    cupy.random.seed(21)
    plain = cupy.asnumpy(cupy.random.standard_normal((3, 3), dtype=cupy.float32))
    plain_next = cupy.asnumpy(cupy.random.random(16))
    cupy.random.seed(21)
    graphed = cg.jit(lambda x: x + cupy.random.standard_normal(x.shape, dtype=x.dtype), config=CONFIG)
    graphed.warmup(cupy.zeros((8, 3), dtype=cupy.float32), progress=False)
    graphed(cupy.zeros((8, 3), dtype=cupy.float32))
    graphed(cupy.zeros((8, 3), dtype=cupy.float32))
    stats = graphed.stats()
    assert stats.fallbacks == 0 and graphed.registry.num_graphs() == 2 and stats.replays == 2
    padded = cupy.asnumpy(graphed(cupy.zeros((3, 3), dtype=cupy.float32)))
    np.testing.assert_array_equal(padded, plain)
    np.testing.assert_array_equal(cupy.asnumpy(cupy.random.random(16)), plain_next)


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_refuses_the_legacy_draws_naming_the_line(switch, monkeypatch):
    config = dict(CONFIG)
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    graphed = cg.jit(noisy, config=config)
    cupy.random.seed(2)
    want = [cupy.asnumpy(leaf) for leaf in noisy(ones())]
    cupy.random.seed(2)
    got = [cupy.asnumpy(leaf) for leaf in graphed(ones())]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))  # eager, as without jit
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls
    detail = stats.detail("library_call")
    assert "cupy.random.rand" in detail and "test_routes_random_gpu.py" in detail and "not routed" not in detail


UNROUTED = {
    "binomial": (lambda x: x + cupy.random.binomial(10, 0.5, size=x.shape).astype(x.dtype),
                 "cupy.random.binomial uses"),
    "seed": (lambda x: (cupy.random.seed(0), x + 1)[1], "cupy.random.seed uses"),
    "array_bounds": (lambda x: x + cupy.random.randint(cupy.zeros(3, int), cupy.full(3, 4)).astype(x.dtype),
                     "not routed: its low is"),
    "choice_p": (lambda x: x + cupy.random.choice(3, size=x.shape, p=cupy.full(3, 1 / 3)).astype(x.dtype),
                 "not routed: with p="),
    "exponential_array": (lambda x: x + cupy.random.exponential(cupy.ones(3)).astype(x.dtype),
                          "not routed: its scale is a ndarray"),
}


@pytest.mark.parametrize("name", sorted(UNROUTED))
def test_what_is_not_routed_is_still_refused_naming_the_line(name):
    fn, words = UNROUTED[name]
    graphed = cg.jit(fn, config=CONFIG)
    x = ones(4)
    cupy.random.seed(8)
    want = cupy.asnumpy(fn(x))
    cupy.random.seed(8)
    np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), want)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and graphed.registry.num_graphs() == 0
    detail = stats.detail("library_call")
    assert words in detail and "test_routes_random_gpu.py" in detail, detail
    assert ("not routed" in words) is ("not routed" in detail)  # a function with no route: refused as before


def test_a_routed_draw_read_on_the_host_is_refused():
    graphed = cg.jit(lambda x: x * float(cupy.random.rand()), config=CONFIG)
    graphed(ones(4))
    assert graphed.stats().fallbacks_by_reason == {"device_to_host_read": 1}, graphed.stats().to_dict()


def test_a_draw_first_made_in_the_capture_run_is_refused():
    graphed = cg.jit(noisy, config=dict(CONFIG, num_warmups=0))
    graphed(ones(4))
    assert graphed.registry.num_graphs() == 0
    assert "drawn first in the capture run" in graphed.stats().detail("library_call")


LEGACY_CALLS = {
    "rand": lambda x: cupy.random.rand(3, 2),
    "rand_float32": lambda x: cupy.random.rand(3, 2, dtype=cupy.float32),
    "randn": lambda x: cupy.random.randn(4),
    "random_sample": lambda x: cupy.random.random_sample((2, 3)),
    "random": lambda x: cupy.random.random(5),
    "random_scalar": lambda x: cupy.random.random(),
    "standard_normal": lambda x: cupy.random.standard_normal((2, 2), dtype=cupy.float32),
    "normal_array_loc": lambda x: cupy.random.normal(x, 2.0),
    "normal": lambda x: cupy.random.normal(0.0, 1.0, size=(3,)),
    "uniform": lambda x: cupy.random.uniform(-1, 1, (2, 5)),
    "uniform_arrays": lambda x: cupy.random.uniform(x, x + 1.0, dtype=cupy.float32),
    "lognormal": lambda x: cupy.random.lognormal(0.0, 0.5, 4),
    "randint": lambda x: cupy.random.randint(3, size=(2, 2)),
    "randint_int32": lambda x: cupy.random.randint(-5, 5, size=4, dtype=np.int32),
    "random_integers": lambda x: cupy.random.random_integers(1, 6, size=3),
    "standard_exponential": lambda x: cupy.random.standard_exponential(5),
    "exponential": lambda x: cupy.random.exponential(2.0, (3,)),
    "choice": lambda x: cupy.random.choice(10, 4),
    "choice_array": lambda x: cupy.random.choice(x[:, 0], (2, 2)),
    "choice_unique": lambda x: cupy.random.choice(10, 5, replace=False),
    "permutation": lambda x: cupy.random.permutation(7),
    "permutation_rows": lambda x: cupy.random.permutation(x),
}


@pytest.mark.parametrize("name", sorted(LEGACY_CALLS))
def test_a_routed_draw_has_the_legacy_calls_shape_and_dtype(name):
    fn = LEGACY_CALLS[name]
    graphed = cg.jit(fn, config=CONFIG)
    x = cupy.arange(24.0, dtype=cupy.float32).reshape(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # random_integers
        want = fn(x)
        graphed(x)
        got = graphed(x)  # a replay
    stats = graphed.stats()
    assert stats.replays == 1 and stats.fallbacks == 0, stats.to_dict()["last_detail_by_reason"]
    assert isinstance(got, cupy.ndarray) and (got.shape, got.dtype) == (want.shape, want.dtype)


def test_the_routed_distributions_are_the_legacy_ones_at_every_replay():
    n = 40_000

    def draws(x):
        return (cupy.random.normal(3.0, 2.0, size=n), cupy.random.uniform(-2.0, 6.0, size=n, dtype=cupy.float32),
                cupy.random.exponential(0.5, n), cupy.random.random_integers(6, size=n),
                cupy.random.permutation(4))

    graphed = cg.jit(draws, config=CONFIG)
    graphed(ones(4))
    firsts = set()
    for _ in range(40):
        z, u, e, dice, perm = (cupy.asnumpy(leaf) for leaf in graphed(ones(4)))
        assert abs(z.mean() - 3.0) < 0.05 and abs(z.std() - 2.0) < 0.05
        assert u.dtype == np.float32 and u.min() >= -2.0 and u.max() < 6.0 and abs(u.mean() - 2.0) < 0.1
        assert e.min() >= 0.0 and abs(e.mean() - 0.5) < 0.02
        assert set(np.unique(dice).tolist()) == {1, 2, 3, 4, 5, 6}
        assert sorted(perm.tolist()) == [0, 1, 2, 3]
        firsts.add(int(perm[0]))
    assert graphed.stats().replays == 40 and graphed.stats().fallbacks == 0
    assert firsts == {0, 1, 2, 3}  # the permutation changes from replay to replay


def test_permutations_of_rows_keep_the_rows():
    graphed = cg.jit(lambda x: cupy.random.permutation(x), config=CONFIG)
    x = cupy.arange(24.0).reshape(8, 3)
    for _ in range(3):
        got = cupy.asnumpy(graphed(x))
        np.testing.assert_array_equal(got[np.argsort(got[:, 0])], cupy.asnumpy(x))
    assert graphed.stats().replays == 2


def test_a_name_bound_before_the_capture_is_routed_too():
    graphed = cg.jit(lambda x: x + bound_early(x.shape, dtype=x.dtype), config=CONFIG)
    x = cupy.zeros((4, 2), dtype=cupy.float32)
    first, second = cupy.asnumpy(graphed(x)), cupy.asnumpy(graphed(x))
    assert graphed.stats().fallbacks == 0 and graphed.stats().replays == 1
    assert not np.array_equal(first, second)
