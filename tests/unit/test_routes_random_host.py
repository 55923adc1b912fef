"""Legacy ``np.random`` draws captured unchanged on the host reference (issue 29), as the GPU routes ``cupy.random``.

With routing on, the legacy draws ``routes/legacy_random.py`` lists go to a generator of the
recording (seeded from NumPy's global state), so a graphed function keeps drawing fresh numbers at
every replay, a seeded program replays the same numbers run after run, and what the GPU does not route
stays refused naming the line. Every test leaves NumPy's global generator as it found it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.random import standard_normal as bound_early  # a name the module bound before any capture

import cupygraph as cg
from cupygraph.backends.routing import LEGACY_RANDOM, route_for, routing_policy
from cupygraph.routes.numpy_random import routed_numpy_random

HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8]}


@pytest.fixture(autouse=True)
def global_state_kept():
    state = np.random.get_state()
    yield
    np.random.set_state(state)


def noisy(x):
    a = np.random.rand(*x.shape)
    b = np.random.normal(1.0, 2.0, size=x.shape)
    c = np.random.randint(0, 1000, size=x.shape[0])
    d = np.random.choice(50, size=3, replace=False)
    e = np.arange(12.0)
    np.random.shuffle(e)
    return x + a + b, c, d, e


def calls(graphed, x, n):
    """n calls' outputs, copied (a replay rewrites its static outputs)."""
    return [tuple(np.array(leaf, copy=True) for leaf in graphed(x)) for _ in range(n)]


def test_unchanged_legacy_draws_capture_and_every_replay_draws_fresh_numbers():
    np.random.seed(5)
    graphed = cg.jit(noisy, config=HOST)
    x = np.ones((8, 3))
    outs = calls(graphed, x, 5)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and graphed.registry.num_graphs() == 1 and stats.replays == 4
    assert len(stats.routed_calls) == 5  # one label per routed line
    assert all(label.startswith("cuRAND (at test_routes_random_host.py:") for label in stats.routed_calls)
    assert any("np.random.shuffle(e)" in label for label in stats.routed_calls)
    for earlier, later in itertools.pairwise(outs):
        for old, new in zip(earlier, later):
            assert not np.array_equal(old, new)  # never a frozen constant
    for total, ints, picked, shuffled in outs:
        assert total.shape == (8, 3) and ints.dtype == np.int64 and ((0 <= ints) & (ints < 1000)).all()
        assert len(set(picked.tolist())) == 3 and ((0 <= picked) & (picked < 50)).all()
        np.testing.assert_array_equal(np.sort(shuffled), np.arange(12.0))


def test_a_seeded_program_replays_the_same_draws_and_another_seed_others():
    x = np.ones((4, 3))

    def run(seed):
        np.random.seed(seed)
        return calls(cg.jit(noisy, config=HOST), x, 4)  # a fresh jit'd copy each time

    first, again, other = run(11), run(11), run(12)
    for a, b in zip(first, again):
        assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not np.array_equal(first[2][0], other[2][0])


def test_the_call_that_captures_draws_what_the_plain_call_draws():
    x = np.zeros((8, 3))
    np.random.seed(21)
    plain = noisy(x)
    after_plain = np.random.get_state()
    np.random.seed(21)
    graphed = cg.jit(noisy, config=HOST)
    got = graphed(x)
    assert graphed.registry.num_graphs() == 1
    assert all(np.array_equal(g, p) for g, p in zip(got, plain))
    # The capture took one seed from the global generator, and the replays draw none from it.
    np.random.set_state(after_plain)
    np.random.mtrand._rand.randint(0, np.iinfo(np.int64).max, dtype=np.int64)
    consumed = np.random.get_state()
    graphed(x)
    graphed(x)
    assert graphed.stats().replays == 2
    now = np.random.get_state()
    assert now[2] == consumed[2] and np.array_equal(now[1], consumed[1])


def take_seed():
    """What a recording that routes draws takes from NumPy's global generator (routes/numpy_random.py)."""
    np.random.mtrand._rand.randint(0, np.iinfo(np.int64).max, dtype=np.int64)


def same_state(a, b):
    return a[2] == b[2] and np.array_equal(a[1], b[1])


def test_warmup_takes_one_seed_per_size_from_the_global_generator_and_its_replays_none():
    """NumPy has one legacy stream, so the seed a recording takes moves it (unlike cuRAND's on the GPU,
    tests/gpu/test_routes_random_gpu.py): warmup() moves it by one draw per size, its warm-ups' and
    capture runs' draws go to the graph's generator, the replays draw nothing from it, and a key's first
    padded call runs eagerly, drawing what the plain call draws."""
    np.random.seed(5)
    graphed = cg.jit(lambda x: x + np.random.standard_normal(x.shape), config=HOST)
    before = np.random.get_state()
    graphed.warmup(np.zeros((8, 3)), progress=False)
    after_warmup = np.random.get_state()
    assert graphed.registry.num_graphs() == 2
    np.random.set_state(before)
    take_seed()
    take_seed()
    assert same_state(np.random.get_state(), after_warmup)
    np.random.set_state(after_warmup)
    graphed(np.zeros((8, 3)))
    graphed(np.zeros((8, 3)))
    assert graphed.stats().replays == 2 and same_state(np.random.get_state(), after_warmup)
    padded = graphed(np.zeros((3, 3)))
    np.random.set_state(after_warmup)
    np.testing.assert_array_equal(padded, np.random.standard_normal((3, 3)))


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_refuses_the_legacy_draws_naming_the_line(switch, monkeypatch):
    config = dict(HOST)
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    graphed = cg.jit(noisy, config=config)
    np.random.seed(2)
    want = noisy(np.ones((8, 3)))
    np.random.seed(2)
    got = graphed(np.ones((8, 3)))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))  # eager, as without jit
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and not stats.routed_calls
    detail = stats.detail("library_call")
    assert "np.random.rand" in detail and "test_routes_random_host.py" in detail and "not routed" not in detail


UNROUTED = {
    "gamma": (lambda x: x + np.random.gamma(2.0, size=x.shape), "np.random.gamma uses"),
    "seed": (lambda x: (np.random.seed(0), x + 1)[1], "np.random.seed uses"),
    "array_bounds": (lambda x: x + np.random.randint(np.zeros(3, int), np.full(3, 4)), "not routed: its low is"),
    "choice_p": (lambda x: x + np.random.choice(3, size=x.shape, p=np.full(3, 1 / 3)), "not routed: with p="),
    "choice_list": (lambda x: x + np.random.choice([1.0, 2.0], size=x.shape), "not routed: its a is a list"),
    "shuffle_list": (lambda x: (np.random.shuffle([1, 2, 3]), x + 1)[1], "not routed: its argument is a list"),
    "exponential_array": (lambda x: x + np.random.exponential(np.ones(3)), "not routed: its scale is a ndarray"),
}


@pytest.mark.parametrize("name", sorted(UNROUTED))
def test_what_the_gpu_does_not_route_is_still_refused_naming_the_line(name):
    fn, words = UNROUTED[name]
    graphed = cg.jit(fn, config=HOST)
    x = np.ones((4, 3))
    np.random.seed(8)
    want = fn(x)
    np.random.seed(8)
    np.testing.assert_array_equal(graphed(x), want)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and graphed.registry.num_graphs() == 0
    detail = stats.detail("library_call")
    assert words in detail and "test_routes_random_host.py" in detail
    assert ("not routed" in words) is ("not routed" in detail)  # a function with no route: refused as before


def test_a_routed_draw_read_on_the_host_is_refused_as_on_the_gpu():
    graphed = cg.jit(lambda x: x * float(np.random.rand()), config=HOST)  # a 0-d device array on the GPU
    graphed(np.ones((4, 3)))
    assert graphed.stats().fallbacks_by_reason == {"device_to_host_read": 1}


def test_a_draw_first_made_in_the_capture_run_is_refused():
    graphed = cg.jit(noisy, config=dict(HOST, num_warmups=0))
    graphed(np.ones((4, 3)))
    assert "drawn first in the capture run" in graphed.stats().detail("library_call")


LEGACY_CALLS = {
    "rand": lambda x: np.random.rand(3, 2),
    "randn": lambda x: np.random.randn(4),
    "random_sample": lambda x: np.random.random_sample((2, 3)),
    "random": lambda x: np.random.random(5),
    "standard_normal": lambda x: np.random.standard_normal((2, 2)),
    "normal_array_loc": lambda x: np.random.normal(x, 2.0),
    "normal": lambda x: np.random.normal(0.0, 1.0, size=(3,)),
    "uniform": lambda x: np.random.uniform(-1, 1, (2, 5)),
    "uniform_arrays": lambda x: np.random.uniform(x, x + 1.0),
    "lognormal": lambda x: np.random.lognormal(0.0, 0.5, 4),
    "randint": lambda x: np.random.randint(3, size=(2, 2)),
    "randint_int32": lambda x: np.random.randint(-5, 5, size=4, dtype=np.int32),
    "random_integers": lambda x: np.random.random_integers(1, 6, size=3),
    "standard_exponential": lambda x: np.random.standard_exponential(5),
    "exponential": lambda x: np.random.exponential(2.0, (3,)),
    "choice": lambda x: np.random.choice(10, 4),
    "choice_array": lambda x: np.random.choice(x[:, 0], (2, 2)),
    "choice_unique": lambda x: np.random.choice(10, 5, replace=False),
    "permutation": lambda x: np.random.permutation(7),
    "permutation_rows": lambda x: np.random.permutation(x),
}


@pytest.mark.parametrize("name", sorted(LEGACY_CALLS))
def test_a_routed_draw_has_the_legacy_calls_shape_and_dtype(name):
    import warnings

    fn = LEGACY_CALLS[name]
    graphed = cg.jit(fn, config=HOST)
    x = np.arange(24.0).reshape(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # random_integers
        want = fn(x)
        graphed(x)
        got = graphed(x)  # a replay
    assert graphed.stats().replays == 1 and graphed.stats().fallbacks == 0
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_permutations_of_rows_keep_the_rows():
    graphed = cg.jit(lambda x: np.random.permutation(x), config=HOST)
    x = np.arange(24.0).reshape(8, 3)
    for _ in range(3):
        got = graphed(x)
        np.testing.assert_array_equal(got[np.argsort(got[:, 0])], x)


def test_a_name_bound_before_the_capture_is_routed_too():
    graphed = cg.jit(lambda x: x + bound_early(x.shape), config=HOST)
    x = np.zeros((4, 2))
    first = np.array(graphed(x), copy=True)
    state = np.random.get_state()
    second = np.array(graphed(x), copy=True)
    assert graphed.stats().fallbacks == 0 and graphed.stats().replays == 1
    assert not np.array_equal(first, second)
    assert np.array_equal(np.random.get_state()[1], state[1])  # the replay drew from the graph's generator


def test_a_replay_the_capture_did_not_route_runs_eagerly():
    population = {"a": 4}
    graphed = cg.jit(lambda x: x + np.random.choice(population["a"], size=x.shape), config=HOST)
    x = np.zeros((4, 2))
    graphed(x)
    population["a"] = [1.0, 2.0]  # a list: the GPU would upload it, so it is not routed
    got = graphed(x)
    assert set(got.ravel().tolist()) <= {1.0, 2.0}
    assert graphed.stats().fallbacks_by_reason == {"replay_mismatch": 1}


# -- the compositions themselves, drawn through the host router ------------------------------------


def routed(name, *args, **kwargs):
    return route_for(LEGACY_RANDOM)(f"np.random.{name}", args, kwargs)


@pytest.fixture
def router():
    np.random.seed(0)
    with routing_policy(True) as ledger, routed_numpy_random(lambda: None):
        yield ledger


def test_the_distributions_are_the_legacy_ones(router):
    n = 40_000
    z = routed("normal", 3.0, 2.0, size=n)
    assert abs(z.mean() - 3.0) < 0.05 and abs(z.std() - 2.0) < 0.05
    u = routed("uniform", -2.0, 6.0, size=n, dtype=np.float32)
    assert u.dtype == np.float32 and u.min() >= -2.0 and u.max() < 6.0 and abs(u.mean() - 2.0) < 0.1
    e = routed("exponential", 0.5, n)
    assert e.min() >= 0.0 and abs(e.mean() - 0.5) < 0.02 and abs(e.std() - 0.5) < 0.02
    ln = routed("lognormal", 0.0, 0.25, n)
    assert abs(np.log(ln).std() - 0.25) < 0.01
    dice = routed("random_integers", 6, size=n)
    assert set(np.unique(dice).tolist()) == {1, 2, 3, 4, 5, 6}
    ints = routed("randint", 3, 7, size=n, dtype=np.uint8)
    assert ints.dtype == np.uint8 and set(np.unique(ints).tolist()) == {3, 4, 5, 6}
    firsts = [int(routed("permutation", 4)[0]) for _ in range(400)]
    assert set(firsts) == {0, 1, 2, 3}
    assert len(router) == 6 + 400
    assert all(label.startswith("cuRAND (at test_routes_random_host.py:") for label in router)


def test_bad_arguments_raise_as_the_legacy_calls_do(router):
    with pytest.raises(ValueError, match="scale < 0"):
        routed("exponential", -1.0, 3)
    with pytest.raises(ValueError, match="larger sample than population"):
        routed("choice", 3, 4, replace=False)
    with pytest.raises(ValueError, match="cannot be broadcast to size"):
        routed("normal", np.zeros((2, 3)), 1.0, size=3)
    with pytest.raises(ValueError):
        routed("randint", 5, 5)
