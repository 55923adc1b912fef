"""A jitted function returns what the plain function returns: the same Python types (a NumPy
scalar stays a scalar), and arrays of a subclass that a static buffer could not keep are refused,
never silently turned into plain arrays (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.errors import InputMismatchError

HOST = {"backend": "host", "capture_sizes": [4, 8]}


def _total(x):
    return x.sum()


def _pair(x):
    return x * 2, x.max(), np.float32(1.5)


@pytest.mark.parametrize("output_mode", ["copy", "view"])
@pytest.mark.parametrize("rows", [3, 4])  # padded, and exactly a capture size (bound under "auto")
def test_a_scalar_result_comes_back_as_the_numpy_scalar_the_plain_function_returns(output_mode, rows):
    graphed = cg.jit(_total, config={**HOST, "output_mode": output_mode})
    for seed in range(3):  # capture + first replay, then replays
        x = np.random.default_rng(seed).standard_normal((rows, 2))
        got, want = graphed(x), _total(x)
        assert type(got) is type(want) is np.float64
        assert got == pytest.approx(want, rel=1e-12)  # a sum over a padded batch: up to rounding
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits >= 2


@pytest.mark.parametrize("num_warmups", [0, 1])
def test_scalars_in_a_structure_keep_their_types_with_and_without_warmups(num_warmups):
    graphed = cg.jit(_pair, config={**HOST, "num_warmups": num_warmups})
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 2)).astype(np.float32)
        got, want = graphed(x), _pair(x)
        assert [type(v) for v in got] == [type(v) for v in want] == [np.ndarray, np.float32, np.float32]
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1] and got[2] == want[2]
    assert graphed.stats().fallbacks == 0


def test_a_0d_array_result_stays_a_0d_array():
    def first(x):
        return x[0, 0, ...]  # NumPy returns a 0-d array here, not a scalar

    graphed = cg.jit(first, config=HOST)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 2))
        got = graphed(x)
        assert type(got) is np.ndarray and got.shape == () and got == first(x)


def test_a_result_whose_type_changes_between_scalar_and_0d_array_runs_eagerly():
    as_array = [False]  # Python state flipped behind the graph's back: the replay must notice

    def sometimes_scalar(x):
        return np.asarray(x.sum()) if as_array[0] else x.sum()

    graphed = cg.jit(sometimes_scalar, config=HOST)
    x = np.ones((3, 2))
    assert type(graphed(x)) is np.float64
    as_array[0] = True
    got = graphed(x)
    assert type(got) is np.ndarray and got.shape == ()
    assert graphed.stats().fallbacks_by_reason["replay_mismatch"] == 1


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own advice
@pytest.mark.parametrize("position", ["batched", "whole", "constant"])
def test_an_ndarray_subclass_argument_is_refused_naming_it(position):
    m = np.asmatrix(np.arange(6.0).reshape(3, 2))
    plain = np.arange(6.0).reshape(3, 2)

    def square(x, y):
        return x * y  # a matrix product for np.matrix, element-wise for arrays

    options = {"batched": {}, "whole": {"batch_argnums": 1}, "constant": {"batch_argnums": 1, "constant_argnums": 0}}
    graphed = cg.jit(square, config=HOST, **options[position])
    args = (m, plain) if position != "batched" else (m, m.T)
    with pytest.raises(InputMismatchError, match=r"argument 0 of square\(\) is a numpy\.matrix.*np\.asarray"):
        graphed(*args)
    assert graphed.registry.num_graphs() == 0


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_subclass_after_a_plain_call_of_the_same_shape_is_refused_too():
    graphed = cg.jit(lambda x: x * x, config=HOST)
    x = np.arange(6.0).reshape(3, 2)
    graphed(x)
    graphed(x)  # the fast path knows this shape now
    with pytest.raises(InputMismatchError, match=r"numpy\.matrix"):
        graphed(np.asmatrix(x))


def test_a_masked_array_keeps_its_own_advice():
    graphed = cg.jit(lambda x: x + 1, config=HOST)
    with pytest.raises(InputMismatchError, match="masked array"):
        graphed(np.ma.masked_array(np.ones((3, 2)), mask=False))
