"""Issue 27 on a real GPU: results as the plain function returns them, subclasses refused, NaN static
keys, methods, padding that repeats the last row, a failure the padding caused, and debug output that
belongs to its function. The host variants are tests/unit/test_plain_results.py, test_static_keys.py,
test_jit_methods.py, test_padding_rows.py and test_debug_logging.py."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.errors import InputMismatchError

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

CFG = dict(backend="cupy", capture_sizes=[4, 8])


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("output_mode", ["copy", "view"])
@pytest.mark.parametrize("rows", [3, 4])
def test_a_reduction_stays_a_0d_cupy_array(output_mode, rows):
    f = cg.jit(lambda x: x.sum(), config={**CFG, "output_mode": output_mode})
    rng = np.random.default_rng(1)
    with cupy.cuda.Device(0):
        for _ in range(3):
            x = rand(rng, rows, 5)
            got, want = f(x), x.sum()
            assert type(got) is cupy.ndarray and got.shape == () and type(want) is cupy.ndarray
            np.testing.assert_allclose(float(got), float(want), rtol=1e-6)  # a sum over a padded batch
        assert f.stats().fallbacks == 0 and f.stats().hits >= 2


def test_a_cupy_ndarray_subclass_is_refused_naming_it():
    class Tagged(cupy.ndarray):
        pass

    f = cg.jit(lambda x: x * 2, config=CFG)
    with cupy.cuda.Device(0):
        x = rand(np.random.default_rng(2), 3, 5)
        f(x)
        with pytest.raises(InputMismatchError, match=r"argument 0 of <lambda>\(\) is a .*Tagged.*subclass of cupy"):
            f(x.view(Tagged))


def test_a_nan_static_argument_replays_one_graph():
    f = cg.jit(lambda x, a: x * 2, config=CFG)
    with cupy.cuda.Device(0):
        x = rand(np.random.default_rng(3), 3, 5)
        for _ in range(20):
            f(x, float("nan"))
    assert f.registry.num_graphs() == 1 and f.stats().hits == 19


def test_methods_bind_their_instance_and_arrays_read_through_self_are_named():
    class Layer:
        def __init__(self, k):
            self.w = cupy.full(5, k, dtype=cupy.float32)

        @cg.jit(batch_argnums=1, config=CFG)
        def forward(self, x):
            return x * self.w

    with cupy.cuda.Device(0):
        a, b = Layer(2.0), Layer(3.0)
        x = rand(np.random.default_rng(4), 3, 5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                np.testing.assert_array_equal(cupy.asnumpy(a.forward(x)), cupy.asnumpy(x * 2))
                np.testing.assert_array_equal(cupy.asnumpy(b.forward(x)), cupy.asnumpy(x * 3))
        assert any("self.w" in str(w.message) for w in caught), [str(w.message) for w in caught]
        stats = a.forward.stats()
        assert Layer.forward.registry.num_graphs() == 2 and stats.hits == 4 and stats.fallbacks == 0
        assert a.forward.warmup(x) == 1  # size 8 (4 is held)


def test_edge_padding_repeats_the_last_real_row_on_every_padded_call():
    def column_sums(x):
        return x.sum(axis=0, keepdims=True) + 0 * x[:1]

    f = cg.jit(column_sums, out_batched=False, config={**CFG, "pad_mode": "edge"})
    rng = np.random.default_rng(5)
    with cupy.cuda.Device(0):
        seen = set()
        for n in (3, 3, 2, 5, 4, 3):
            x = cupy.asarray(rng.integers(-9, 9, (n, 2)).astype(np.float32))  # integers: exact sums
            padded = 4 if n <= 4 else 8
            # The call that captures a key runs the function as it is (unpadded); replays see the edge padding.
            want = column_sums(x) + (0 if padded not in seen else padded - n) * x[-1:]
            seen.add(padded)
            np.testing.assert_array_equal(cupy.asnumpy(f(x)), cupy.asnumpy(want))
    assert f.stats().fallbacks == 0 and f.stats().hits >= 3


def test_a_failure_only_the_padding_causes_is_reported_as_such():
    def four_rows_unsupported(x):
        if x.shape[0] == 4:  # only the padded static buffer has 4 rows
            raise ValueError("four rows are not supported")
        return x * 2

    f = cg.jit(four_rows_unsupported, config=CFG)
    with cupy.cuda.Device(0):
        x = rand(np.random.default_rng(6), 3, 5)
        np.testing.assert_array_equal(cupy.asnumpy(f(x)), cupy.asnumpy(x * 2))
    assert "padded from 3 to 4 rows" in f.stats().detail("raised_on_padding")


def test_debug_output_belongs_to_its_function(capsys):
    def watched(x):
        return x * 2

    def quiet(x):
        return x - 1

    before = (logging.getLogger("cupygraph").level, list(logging.getLogger("cupygraph").handlers))
    debugged = cg.jit(watched, config={**CFG, "debug": True})
    other = cg.jit(quiet, config=CFG)
    with cupy.cuda.Device(0):
        for n in (3, 5, 3):
            x = rand(np.random.default_rng(n), n, 5)
            other(x)
            debugged(x)
    err = capsys.readouterr().err
    assert "watched() captures" in err and "quiet" not in err
    assert (logging.getLogger("cupygraph").level, list(logging.getLogger("cupygraph").handlers)) == before
