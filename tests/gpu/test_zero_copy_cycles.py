"""Callers that cycle among 2 to 8 sets of input buffers, in a fixed cyclic order and in random order
(issue 30), for every kind of plan the compiled replay is to serve: one and several array arguments,
a constant, a static (non-array) argument, an unbatched array argument, two outputs, a 4 MiB output,
``output_mode="view"``, and a function that writes into its argument.

Every call is compared bit for bit with the function run eagerly on copies of the same arguments
(fresh random data in each buffer before each call, the static buffers poisoned with NaN first), and
so is every argument afterwards. The statistics checked hold before and after issue 30's compiled
replay: with ``executables_per_graph=8`` no call re-points an executable once every buffer set has
been seen by a replay, and a call with addresses no executable holds re-points one and is counted.

``test_compiled_path_serves_<case>``: the compiled replay itself (``GraphedFunction.record``) serves
every steady call of that case. Those are what issue 30 builds: one test per case, so a run shows
which are served.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers  # noqa: E402

from cupygraph.backends.fastpath.record import COMPILED  # noqa: E402
from cupygraph.pytree import flatten  # noqa: E402

ROWS, COLS = 8, 64
LARGE_COLS = (4 << 20) // (ROWS * 4)  # a float32 output of ROWS rows and 4 MiB
EXECUTABLES = 8


def _two_outputs(x):
    return x * np.float32(2.0), cupy.tanh(x)


def _writes_into_argument(x):
    x *= np.float32(1.5)
    return x + np.float32(0.25)


@dataclasses.dataclass(frozen=True)
class Case:
    """One kind of plan: ``fn(*batched, *extra())``, the batched arrays cycled among buffer sets."""

    fn: Callable
    mode: str = "copy"
    batched: int = 1
    cols: int = COLS
    extra: Callable[[], tuple] = tuple
    """Arguments after the batched ones, made once per test: the same objects at every call."""
    options: dict = dataclasses.field(default_factory=dict)
    stable: bool = True
    """Every address a call presents comes from the buffer sets, an output ring or a static buffer (a
    fresh output of over 64 MiB comes from CuPy's pool, wherever the pool puts it)."""


CASES = {
    "one_argument": Case(lambda x: cupy.tanh(x * np.float32(1.5)) + x),
    "view_mode": Case(lambda x: cupy.tanh(x * np.float32(1.5)) + x, mode="view"),
    "several_arguments": Case(lambda x, y, z: x * y + z, batched=3),
    "constants": Case(lambda x, w: x * w + np.float32(1.0), options=dict(constant_argnums=(1,)),
                      extra=lambda: (cupy.linspace(0.5, 1.5, COLS, dtype=np.float32),)),
    "static_argument": Case(lambda x, k: x * np.float32(k) - np.float32(0.5), extra=lambda: (1.25,)),
    "unbatched_argument": Case(lambda x, w: x - w, extra=lambda: (cupy.linspace(-1, 1, COLS, dtype=np.float32),)),
    "two_outputs": Case(_two_outputs),
    "two_outputs_view": Case(_two_outputs, mode="view"),
    "large_output": Case(lambda x: x * np.float32(1.5) + np.float32(0.25), cols=LARGE_COLS, stable=False),
    "large_output_view": Case(lambda x: x * np.float32(1.5) + np.float32(0.25), cols=LARGE_COLS, mode="view"),
    "writes_into_argument": Case(_writes_into_argument),
}
PATTERNS = [("cyclic", 2), ("random", 3), ("cyclic", 8), ("random", 8)]


@pytest.fixture(autouse=True)
def _device():
    cupy.cuda.Device(0).use()


def graphed(case: Case, executables: int = EXECUTABLES):
    config = dict(backend="cupy", input_binding="auto", capture_sizes=[ROWS], output_mode=case.mode,
                  executables_per_graph=executables)
    return cg.jit(case.fn, config=config, batch_argnums=tuple(range(case.batched)), **case.options)


def buffer_sets(case: Case, count: int) -> list[tuple]:
    return [tuple(cupy.empty((ROWS, case.cols), np.float32) for _ in range(case.batched)) for _ in range(count)]


def assert_same(got, want, what: str) -> None:
    got_leaves, got_spec = flatten(got, lambda v: isinstance(v, cupy.ndarray))
    want_leaves, want_spec = flatten(want, lambda v: isinstance(v, cupy.ndarray))
    assert got_spec == want_spec and len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves):
        g, w = cupy.asnumpy(g), cupy.asnumpy(w)
        assert g.shape == w.shape and g.dtype == w.dtype, what
        np.testing.assert_array_equal(g, w, err_msg=what)


class Caller:
    """One graphed case called on buffer sets: fresh data in the set, eager on copies, static buffers
    poisoned, the call, every output and argument compared. What each call did is kept."""

    def __init__(self, case: Case, seed: int, executables: int = EXECUTABLES):
        self.case, self.g = case, graphed(case, executables)
        self.extra = case.extra()
        self.random = cupy.random.RandomState(seed)  # its own state: the global one is left alone
        self.seen: set[int] = set()
        """Buffer sets a replay has bound (the call that captured ran the function as it is)."""

    def __call__(self, buffers: tuple, label: int, what: str) -> tuple[bool, bool]:
        """(whether the call replayed a graph, whether the compiled replay served it)."""
        for array in buffers:
            array[...] = self.random.standard_normal(array.shape, dtype=np.float32)
        args = (*buffers, *self.extra)
        copies = tuple(a.copy() if isinstance(a, cupy.ndarray) else a for a in args)
        want = self.case.fn(*copies)
        g = self.g
        poison_static_buffers(g, cupy)
        hits, record = g.stats().hits, g.record
        served_before = -1 if record is None else record.served
        got = g(*args)
        served = record is not None and record.served == served_before + 1
        replayed = g.stats().hits > hits
        assert_same(got, want, what)
        for array, copy in zip(buffers, copies):
            np.testing.assert_array_equal(cupy.asnumpy(array), cupy.asnumpy(copy), err_msg=f"{what}: argument")
        if replayed:
            self.seen.add(label)
        return replayed, served  # (the result goes with this frame: a copy-mode ring gets its array back)


def order(pattern: str, count: int, calls: int, rng: np.random.Generator) -> list[int]:
    """Which buffer set each of ``calls`` calls takes: in turn, or at random after every set twice (in
    random order: the first call captures, running the function as it is, so every set is also replayed)."""
    if pattern == "cyclic":
        return [i % count for i in range(calls)]
    drawn = [*rng.permutation(count), *rng.permutation(count), *rng.integers(count, size=max(calls - 2 * count, 0))]
    return [int(k) for k in drawn]


@pytest.mark.parametrize("pattern, count", PATTERNS, ids=[f"{p}{c}" for p, c in PATTERNS])
@pytest.mark.parametrize("name", list(CASES))
def test_cycling_among_buffers_equals_eager_and_repoints_only_unseen_addresses(name, pattern, count):
    case = CASES[name]
    rng = np.random.default_rng([count, len(name)])
    caller = Caller(case, seed=count)
    sets = buffer_sets(case, count)
    warm = None
    for i, k in enumerate(order(pattern, count, 5 * count + 4, rng)):
        caller(sets[k], k, f"{name}, {pattern} over {count}, call {i}, buffer set {k}")
        if warm is None and len(caller.seen) == count:
            warm = caller.g.stats().repointed_calls
    stats = caller.g.stats()
    assert stats.fallbacks == 0 and stats.captures == 1, stats.to_dict()
    # One executable per address set at most, within the bound (a fresh output's addresses are CuPy's pool's).
    assert stats.executables_made <= (min(count, EXECUTABLES - 1) if case.stable else EXECUTABLES - 1), stats.to_dict()
    assert warm is not None, f"some buffer set never replayed: {stats.to_dict()}"
    if case.stable:
        assert stats.repointed_calls == warm, (
            f"a call re-pointed an executable although one held its addresses: {stats.to_dict()}")


def test_unseen_addresses_repoint_and_are_counted():
    case = CASES["one_argument"]
    caller = Caller(case, seed=1)
    sets = buffer_sets(case, EXECUTABLES)
    for i in range(3 * EXECUTABLES):
        caller(sets[i % EXECUTABLES], i % EXECUTABLES, f"warm-up call {i}")
    assert len(caller.seen) == EXECUTABLES
    kept = []
    for i in range(3):  # each a buffer no executable holds (kept alive: its address stays unseen)
        kept.append(buffer_sets(case, 1)[0])
        before = caller.g.stats()
        replayed, _ = caller(kept[-1], EXECUTABLES + i, f"unseen buffer {i}")
        after = caller.g.stats()
        assert replayed
        assert after.repointed_calls == before.repointed_calls + 1, (before.to_dict(), after.to_dict())
        assert after.rebinds_by_argument["argument 0"] == before.rebinds_by_argument["argument 0"] + 1
    assert caller.g.stats().executables_made <= EXECUTABLES - 1  # bounded by executables_per_graph


# -- the compiled replay serves every steady call -------------------------------------------------------


def served_steadily(name: str, count: int = EXECUTABLES) -> None:
    """Random order over ``count`` buffer sets: after every set was replayed (two rounds) and one more
    round, each call of two more rounds is served by the compiled replay (and equal to eager, as every call)."""
    if not COMPILED:
        pytest.skip("the compiled replay is not built here (python setup.py build_ext --inplace)")
    case = CASES[name]
    caller = Caller(case, seed=30)
    sets = buffer_sets(case, count)
    calls = order("random", count, 5 * count, np.random.default_rng(30))
    missed = []
    for i, k in enumerate(calls):
        replayed, served = caller(sets[k], k, f"{name}, call {i}, buffer set {k}")
        if i >= 3 * count and not served:
            missed.append((i, k, replayed))
    assert len(caller.seen) == count, f"{name}: some buffer set never replayed: {caller.g.stats().to_dict()}"
    record = caller.g.record
    assert not missed, (f"{name}: {len(missed)} of {2 * count} steady calls not served by the compiled replay "
                        f"(call, buffer set, replayed): {missed[:6]}; record: "
                        f"{None if record is None else (record.served, record.passed)}")


def test_compiled_path_serves_one_argument():
    served_steadily("one_argument")


def test_compiled_path_serves_view_mode():
    served_steadily("view_mode")


def test_compiled_path_serves_several_arguments():
    served_steadily("several_arguments")


def test_compiled_path_serves_constants():
    served_steadily("constants")


def test_compiled_path_serves_static_argument():
    served_steadily("static_argument")


def test_compiled_path_serves_unbatched_argument():
    served_steadily("unbatched_argument")


def test_compiled_path_serves_two_outputs():
    served_steadily("two_outputs")


def test_compiled_path_serves_two_outputs_view():
    served_steadily("two_outputs_view")


def test_compiled_path_serves_large_output():
    served_steadily("large_output")


def test_compiled_path_serves_large_output_view():
    served_steadily("large_output_view")


def test_compiled_path_serves_writes_into_argument():
    served_steadily("writes_into_argument")
