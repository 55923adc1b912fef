"""The known sharp edges of cupygraph, each stated with a test (run on the host backend).

1. View outputs are overwritten by the next call of the same function; with debug=True,
   ``cupygraph.check_fresh`` (and passing one back in) reports a read of an overwritten view.
2. Constant arguments are captured by address: a new array is a new key (re-capture, counted),
   or an error with on_capture_error="raise".
3. Outputs are cut to the real batch on their leading axis: the first padded call of each key runs
   the function as it is and compares output shapes with the graph's (an unbatched output as long
   as the padded batch is not cut); an output whose batch axis is not leading makes the key's
   padded calls run eagerly (``batch_axis_not_leading``).
4. Padding rows hold pad_value and take part in row-mixing computations of replays.
5. Sizes above the largest capture size run eagerly, counted with the reason.
6. Ops that cannot be captured fall back to eager for that key, with the reason (or raise).
7. Non-array arguments are static: part of the key, so hashable; 1, 1.0 and True differ; NaN keys
   as NaN; a value that never compares equal to an earlier call's is warned about and counted.
8. A function that writes into a copied (batched or unbatched) argument writes into the graph's
   static copy: the capture detects it (warm-up; on the host the run itself) and each replay copies
   the written rows back into the caller's arrays. Undetected on the GPU with num_warmups=0, or
   when the writes depend on the data and the warm-up's data did not trigger them.
9. A graph break is captured in FULL mode: a cuBLAS op there makes the FULL keys fall back. The
   host backend refuses it too (and the GPU test is tests/gpu/test_piecewise.py,
   ``test_without_break_falls_back_with_cublas_reason_and_full_mode_falls_back_with_break``).
10. Python values read from the data (``float(x.sum())``, ``if x.any():``, ``x[x > 0]``) cannot
   be recorded: the key falls back to eager, counted with the op and the line; values that depend
   only on shapes (``x.shape[0]``, ``len(x)``) are fine.
11. A function that raises on the padding rows (a zero matrix is singular) runs that key eagerly
   with the reason ``raised_on_padding``; ``pad_mode="edge"`` pads with the last real row instead.
12. Products round by row count: a padded GEMM is the padded eager GEMM bit for bit, the unpadded
   one only within rounding (tests/unit/test_padded_products.py states the bound).
13. Methods take ``self`` as argument 0 (as with ``jax.jit``), a static argument.
14. Arguments are plain arrays (a subclass such as ``np.matrix`` is refused); results are what the
   function returns (a NumPy scalar stays a scalar).
15. The function runs several times on the first call of a key (the call itself as it is, its
   warm-ups, the capture): Python side effects happen each time (``test_execution_counts.py``).
16. Python numbers read besides the arguments (``self.scale``, a global, a closure variable) are
   baked into the graph as the capture read them; the host reference re-runs the function and reads
   the new value. ``debug=True`` warns on a replay after such a number changed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from replay_helpers import gemm_bound

import cupygraph as cg

HOST = dict(backend="host", max_capture_size=16)


def test_1_view_outputs_are_overwritten_by_the_next_call():
    f = cg.jit(lambda x: x * 2, config=dict(HOST, output_mode="view"))
    f(np.ones((3, 2)))  # the call that captures returns its own eager result
    first = f(np.ones((3, 2)))
    f(np.full((3, 2), 5.0))
    assert first.tolist() == [[10.0, 10.0]] * 3  # the first result changed under our feet
    owned = cg.jit(lambda x: x * 2, config=HOST)
    kept = owned(np.ones((3, 2)))
    owned(np.full((3, 2), 5.0))
    assert kept.tolist() == [[2.0, 2.0]] * 3


def test_1_debug_mode_reports_reads_of_overwritten_views():
    f = cg.jit(lambda x: x * 2, config=dict(HOST, output_mode="view", debug=True))
    f(np.ones((3, 2)))  # the call that captures returns its own eager result
    first = f(np.ones((3, 2)))
    f(np.full((3, 2), 5.0))
    with pytest.raises(cg.StaleOutputError, match="valid until the next call"):
        cg.check_fresh(first)
    with pytest.raises(cg.StaleOutputError, match="argument 0"):
        f(first)


def test_2_constant_arguments_are_captured_by_address():
    # With input_binding="copy"; under "auto" a new array of the same layout is rebound instead.
    f = cg.jit(lambda x, w: x * w, config=dict(HOST, input_binding="copy"), constant_argnums=(1,))
    x, w = np.ones((2, 3)), np.full(3, 2.0)
    f(x, w)
    w[...] = 3.0  # in place: same graph, new values
    assert f(x, w).tolist() == [[3.0] * 3] * 2 and f.stats().captures == 1
    assert f(x, np.full(3, 4.0)).tolist() == [[4.0] * 3] * 2  # a new array: a new key
    assert f.stats().captures == 2 and sum(f.stats().recaptures_by_reason.values()) == 1
    strict = cg.jit(lambda x, w: x * w, config=dict(HOST, on_capture_error="raise", input_binding="copy"),
                    constant_argnums=(1,))
    strict(x, w)
    with pytest.raises(cg.InputMismatchError, match="constant argument"):
        strict(x, np.full(3, 4.0))


def test_3_outputs_are_cut_on_their_leading_axis_as_the_first_padded_call_shows():
    fn = lambda x: (x.sum(axis=0), x + 1)
    x = np.ones((5, 8))  # padded to 8: the column sums are 8 long too, but not batched
    f = cg.jit(fn, config=HOST)
    for _ in range(2):  # the call that captures shows it, its replay keeps it
        total, plus = f(x)
        assert total.shape == (8,) and plus.shape == (5, 8)
    assert f.stats().hits == 1
    transposed = cg.jit(lambda x: x.T, config=HOST)  # the batch on axis 1: no cut can be right
    for _ in range(2):
        assert transposed(x).shape == (8, 5)
    assert transposed.stats().fallbacks_by_reason == {"batch_axis_not_leading": 2}
    assert "output 0 of <lambda>() has shape [8, 5]" in transposed.stats().detail("batch_axis_not_leading")


def test_4_padding_rows_take_part_in_row_mixing():
    fn = lambda x: x - x.mean(axis=0)  # the mean sees the padding rows
    x = np.arange(6.0).reshape(3, 2)
    f = cg.jit(fn, config=dict(HOST, pad_value=0))
    assert np.array_equal(f(x), fn(x))  # the call that captures runs the function as it is
    assert not np.allclose(f(x), fn(x))  # a replay, padded to 4 rows: the mean divides by 4
    exact = cg.jit(fn, config=dict(backend="host", capture_sizes=[3]))(x)
    assert np.allclose(exact, fn(x))


def test_5_sizes_above_the_largest_capture_size_run_eagerly():
    f = cg.jit(lambda x: x + 1, config=HOST)
    f(np.ones((17, 2)))
    assert f.registry.num_graphs() == 0
    assert f.stats().fallbacks_by_reason == {"above_largest_capture_size": 1}
    assert f.stats().detail("above_largest_capture_size") == "batch of 17 is above the largest capture size 16"


def test_6_uncapturable_ops_fall_back_or_raise():
    w = np.array([[1.0, 2.0], [3.0, 4.0]])

    def fn(x):
        return x @ w + 1  # cuBLAS on the GPU: CuPy refuses it under capture

    unrouted = dict(HOST, route_library_calls=False)  # (routed by default since issue 29: test_routes_host.py)
    f = cg.jit(fn, config=unrouted)
    x = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(f(x), fn(x)) and np.array_equal(f(x + 1), fn(x + 1))
    assert f.stats().fallbacks_by_reason == {"library_call": 2} and f.stats().capture_failures == 1
    assert "cuBLAS" in f.stats().detail("library_call")
    assert "(at test_jit_footguns.py:" in f.stats().detail("library_call")
    strict = cg.jit(fn, config=dict(unrouted, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match="cuBLAS"):
        strict(x)


def test_9_a_graph_break_is_captured_in_full_mode():
    matmul = cg.graph_break(np.matmul)
    fn = lambda x: matmul(x, np.eye(2)) * 2
    x = np.arange(6.0).reshape(3, 2)
    full = cg.jit(fn, config=dict(HOST, mode="FULL", route_library_calls=False))  # (issue 29 routes it)
    assert np.array_equal(full(x), fn(x))
    assert full.stats().fallbacks_by_reason == {"library_call": 1}
    piecewise = cg.jit(fn, config=dict(HOST, mode="PIECEWISE"))
    for shift in range(3):
        assert np.array_equal(piecewise(x + shift), fn(x + shift))
    assert piecewise.stats().fallbacks == 0 and piecewise.stats().replays_by_mode == {"PIECEWISE": 2}


def test_10_values_read_from_the_data_fall_back_shapes_do_not():
    reads = cg.jit(lambda x: x * float(x.max()), config=HOST)
    # Shapes are fine (the batch axis is the padded size there: trailing axes are the real ones).
    shapes = cg.jit(lambda x: x * (x.shape[1] + len(x[0])), config=HOST)
    for n in (3, 3, 4):
        x = np.arange(2.0 * n).reshape(n, 2)
        assert np.array_equal(reads(x), x * float(x.max()))
        assert np.array_equal(shapes(x), x * 4)
    assert reads.stats().fallbacks_by_reason == {"device_to_host_read": 3}
    assert shapes.stats().fallbacks == 0 and shapes.stats().hits == 2


def test_7_non_array_arguments_are_static_and_typed():
    f = cg.jit(lambda x, s: x * s, config=HOST)
    x = np.ones((2, 2), dtype=np.float32)
    assert f(x, 1).dtype == (x * 1).dtype and f(x, 1.5).tolist() == [[1.5, 1.5]] * 2
    assert f.stats().captures == 2
    with pytest.raises(cg.InputMismatchError, match="unhashable"):
        f(x, [1, 2])


def test_8_functions_writing_into_copied_arguments_write_back():
    def fn(x):
        x *= 2  # eagerly this changes the caller's array; the graph changes its static copy
        return x + 1

    f = cg.jit(fn, config=HOST)
    x = np.ones((3, 2))
    assert f(x).tolist() == [[3.0, 3.0]] * 3
    assert x.tolist() == [[2.0, 2.0]] * 3  # copied back after the replay
    assert f.registry.num_graphs() == 1 and f.registry.entries()[0].written == (0,)


def test_7_nan_statics_key_as_nan():
    f = cg.jit(lambda x, a: x * 2, config=HOST)
    for _ in range(5):
        f(np.ones((3, 2)), float("nan"))
    assert f.registry.num_graphs() == 1 and f.stats().hits == 4


def test_11_a_function_that_raises_on_the_padding_runs_eagerly_saying_so():
    a = np.eye(3)[None].repeat(3, 0) * 2  # three invertible matrices; the padding to 4 is a zero matrix
    f = cg.jit(np.linalg.inv, config=HOST)
    np.testing.assert_array_equal(f(a), np.linalg.inv(a))
    assert "pad_mode='edge'" in f.stats().detail("raised_on_padding")


def test_12_products_round_by_row_count():
    matmul = cg.graph_break(np.matmul)
    w = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    f = cg.jit(lambda x, w: matmul(x, w), constant_argnums=1, config=dict(HOST, mode="PIECEWISE"))
    x = np.random.default_rng(1).standard_normal((5, 32)).astype(np.float32)
    padded = np.concatenate([x, np.zeros((3, 32), np.float32)])  # 5 rows pad to 8
    np.testing.assert_array_equal(f(x, w), x @ w)  # the call that captures runs as it is, at 5 rows
    np.testing.assert_array_equal(f(x, w), (padded @ w)[:5])  # replays: the padded product
    assert (np.abs(f(x, w).astype(np.float64) - x @ w) <= gemm_bound(x, w)).all()


def test_13_methods_take_self_as_argument_0():
    class Model:
        @cg.jit(batch_argnums=1, config=HOST)
        def forward(self, x):
            return x + 1

    assert Model().forward(np.ones((3, 2))).tolist() == [[2.0, 2.0]] * 3


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own advice
def test_14_arguments_are_plain_arrays_and_results_are_what_the_function_returns():
    f = cg.jit(lambda x: x.sum(), config=HOST)
    assert type(f(np.ones((3, 2)))) is np.float64
    with pytest.raises(cg.InputMismatchError, match="subclass"):
        f(np.asmatrix(np.ones((3, 2))))


def test_15_the_function_runs_several_times_on_the_first_call_of_a_key():
    runs = []

    def fn(x):
        runs.append(x.shape[0])  # a Python side effect
        return x + 1

    f = cg.jit(fn, config=dict(HOST, num_warmups=1))
    f(np.ones((3, 2)))
    assert runs == [3, 4, 4]  # the call as it is, the warm-up and the capture run (padded to 4)
    f(np.ones((3, 2)))
    assert runs[3:] == [4]  # a host replay runs it again (a GPU replay runs no Python)


def test_16_numbers_read_besides_the_arguments_are_baked_and_debug_mode_says_so():
    class Model:
        def __init__(self):
            self.scale, self.training = 2.0, True

        @cg.jit(batch_argnums=1, config=dict(HOST, debug=True))
        def forward(self, x):
            return x * self.scale if self.training else x

    model, x = Model(), np.ones((3, 2))
    model.forward(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing changed: no warning
        model.forward(x)
    model.scale = 5.0
    with pytest.warns(cg.BakedNumberWarning, match=r"self\.scale was 2\.0 .* is 5\.0 now"):
        model.forward(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per name and value
        model.forward(x)
    model.training = False
    with pytest.warns(cg.BakedNumberWarning, match=r"self\.training was True"):
        model.forward(x)
