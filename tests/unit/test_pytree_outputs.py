"""Outputs in namedtuples, dataclasses, dicts, lists, tuples and None come back with their types,
wherever outputs are flattened and rebuilt (capture, replay, copy/view, out_batched)."""

from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple, Optional

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.pytree import flatten, unflatten


class Stats(NamedTuple):
    total: np.ndarray
    scaled: np.ndarray


@dataclasses.dataclass
class Result:
    value: np.ndarray
    extra: Optional[np.ndarray]
    label: str = "result"


@dataclasses.dataclass(frozen=True)
class Frozen:
    rows: np.ndarray
    norm: np.ndarray = dataclasses.field(default=None, init=False)  # type: ignore[assignment]

    def __post_init__(self):
        object.__setattr__(self, "norm", np.abs(self.rows).sum(axis=1))


def rich(x):
    return {
        "stats": Stats(x.sum(axis=0), x * 2),
        "result": Result(x + 1, None),
        "frozen": Frozen(x - 1),
        "list": [x[:, :1], (x[:, 1:], None)],
        "none": None,
        "ordered": collections.OrderedDict(b=x * 3, a=x * 4),
    }


def check_same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, np.ndarray):
        assert np.array_equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            check_same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            check_same(g, w)
    elif dataclasses.is_dataclass(want):
        for field in dataclasses.fields(want):
            check_same(getattr(got, field.name), getattr(want, field.name))
    else:
        assert got == want


@pytest.mark.parametrize("output_mode", ["copy", "view"])
def test_rich_outputs_keep_their_types_through_capture_and_replays(output_mode):
    f = cg.jit(rich, config=dict(backend="host", max_capture_size=8, output_mode=output_mode),
               out_batched={"stats": Stats(False, True), "result": Result(True, None, False),
                            "frozen": (True, True), "list": [True, (True, None)], "none": None,
                            "ordered": collections.OrderedDict(b=True, a=True)})
    for n, seed in ((3, 0), (3, 1), (5, 2), (8, 3)):
        x = np.random.default_rng(seed).standard_normal((n, 2))
        got = f(x)
        want = rich(x)
        # The column sums see the padding rows (pad_value 0): equal up to rounding.
        assert np.allclose(got["stats"].total, want["stats"].total)
        got["stats"] = got["stats"]._replace(total=want["stats"].total)
        check_same(got, want)
        assert got["frozen"].norm.shape == (n,)
    assert f.stats().fallbacks == 0 and (f.stats().captures, f.stats().hits) == (2, 2)


def test_a_namedtuple_output_alone():
    f = cg.jit(lambda x: Stats(x.sum(axis=1), x * 2), config=dict(backend="host", max_capture_size=8))
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 4))
        out = f(x)
        assert isinstance(out, Stats) and np.array_equal(out.total, x.sum(axis=1))
        assert np.array_equal(out.scaled, x * 2)
    assert f.stats().hits == 2


def test_none_is_an_empty_node_not_a_leaf():
    leaves, spec = flatten((np.ones(2), None, [None]), lambda v: isinstance(v, np.ndarray))
    assert len(leaves) == 1
    rebuilt = unflatten(spec, [np.zeros(2)])
    assert rebuilt[1] is None and rebuilt[2] == [None]
    assert unflatten(flatten(None, lambda v: False)[1], []) is None


def test_flatten_and_unflatten_round_trip_every_container():
    tree = {
        "nt": Stats(1, [2, 3]),
        "dc": Result(4, None, "x"),
        "dd": collections.defaultdict(list, {"k": 5}),
        "t": (6, (7,), []),
    }
    leaves, spec = flatten(tree, lambda v: isinstance(v, int))
    assert leaves == [1, 2, 3, 4, "x", 5, 6, 7]
    rebuilt = unflatten(spec, [10 * v if isinstance(v, int) else v for v in leaves])
    assert rebuilt["nt"] == Stats(10, [20, 30]) and rebuilt["dc"] == Result(40, None, "x")
    assert isinstance(rebuilt["dd"], collections.defaultdict) and rebuilt["dd"]["k"] == 50
    assert rebuilt["dd"].default_factory is list and rebuilt["t"] == (60, (70,), [])
    _, other = flatten({**tree, "t": (6, (7,), [8])}, lambda v: isinstance(v, int))
    assert other != spec  # specs compare: a replay can tell another structure
