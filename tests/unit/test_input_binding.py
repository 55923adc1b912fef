"""Zero-copy arguments (``input_binding="auto"``) on the host reference: the decision, the counts,
the debug log, and results equal to eager in every case the GPU tests cover."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from replay_helpers import run_threads

import cupygraph as cg
from cupygraph.backends.zerocopy.binding import CopyReason, copy_reason
from cupygraph.errors import ConfigError

SIZES = [4, 8]


def graphed(fn, constant_argnums=(), **fields):
    fields.setdefault("capture_sizes", SIZES)
    return cg.jit(fn, config=dict(backend="host", input_binding="auto", **fields), constant_argnums=constant_argnums)


def rand(rows, cols=3, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols))


# -- the decision --------------------------------------------------------------------------------


def _reason(captured, given, alignment=8):
    return copy_reason(captured, given, captured_address=captured.__array_interface__["data"][0],
                       given_address=given.__array_interface__["data"][0], alignment=alignment)


def test_decision_binds_only_the_captured_layout():
    buf = np.empty((8, 3))
    assert _reason(buf, rand(8)) is None
    assert _reason(buf, rand(7)) is CopyReason.PADDED
    assert _reason(buf, rand(8, 4)) is CopyReason.SHAPE
    assert _reason(buf, rand(8).astype(np.float32)) is CopyReason.DTYPE
    assert _reason(buf, np.asfortranarray(rand(8))) is CopyReason.STRIDES
    assert _reason(buf, rand(16)[::2]) is CopyReason.STRIDES
    raw = np.zeros(8 * 3 * 8 + 8, np.uint8)
    odd = raw[4:4 + 8 * 3 * 8].view(np.float64).reshape(8, 3)  # an address 4 bytes off
    assert _reason(buf, odd) is CopyReason.ALIGNMENT


def test_decision_ignores_strides_of_a_single_element():
    buf = np.empty((1, 1))
    assert _reason(buf, rand(4, 4)[:1, :1]) is None


def test_config_field_is_validated_and_case_insensitive():
    assert cg.CUDAGraphConfig(input_binding="AUTO").input_binding == "auto"
    assert cg.CUDAGraphConfig().input_binding == "auto"
    with pytest.raises(ConfigError, match="input_binding"):
        cg.CUDAGraphConfig(input_binding="sometimes")


# -- results equal eager, counted per argument -----------------------------------------------------


def test_exact_batch_binds_padded_batch_copies():
    def f(x, y):
        return x * 2 + y

    g = graphed(f)
    for rows, seed in ((8, 1), (5, 2), (8, 3), (4, 4), (8, 5)):
        x, y = rand(rows, seed=seed), rand(rows, seed=seed + 10)
        np.testing.assert_array_equal(g(x, y), f(x, y))
    stats = g.stats().to_dict()
    # The replays of exact batches (the second and third 8) bind both arguments and the output; the
    # calls that captured (8, then 4) and the first padded one (5) ran the function as it is.
    assert stats["rebinds_by_argument"] == {"argument 0": 2, "argument 1": 2, "output 0": 2}
    assert stats["copies_by_argument"] == {}
    assert g.stats().captures == 2


def test_copy_setting_counts_nothing():
    g = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=SIZES, input_binding="copy"))
    g(rand(8))
    assert g.stats().to_dict()["rebinds_by_argument"] == {}


def test_in_place_function_writes_the_callers_array():
    def f(x):
        x += 1
        return x * 2

    g = graphed(f)
    for rows in (8, 5, 8):
        x = rand(rows, seed=rows)
        want_x = x.copy()
        want = f(want_x)
        got = g(x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, want_x)


def test_same_array_twice():
    def f(a, b):
        a *= 2
        return a + b

    g = graphed(f)
    for rows in (8, 8, 6):
        x = rand(rows, seed=rows)
        want_x = x.copy()
        want = f(want_x, want_x)
        np.testing.assert_array_equal(g(x, x), want)
        np.testing.assert_array_equal(x, want_x)


def test_output_that_is_an_input_is_copied_never_aliased():
    def f(x):
        return x

    g = graphed(f)
    x = rand(8)
    assert g(x) is x  # the call that captures runs the function as it is
    out = g(x)
    np.testing.assert_array_equal(out, x)
    assert not np.shares_memory(out, x)
    assert g.stats().to_dict()["rebinds_by_argument"] == {}


def test_views_and_non_contiguous_inputs_are_copied():
    def f(x):
        return x * 3

    g = graphed(f)
    base = rand(16, 6, seed=3)
    for view in (base[::2, :3], base[:8, ::2], np.asfortranarray(base[:8, :3]), base[8:, :3]):
        np.testing.assert_array_equal(g(view), f(view))
    contiguous_slice = base[4:12]
    g2 = graphed(f)
    for _ in range(2):  # the first call captures; the second replays
        np.testing.assert_array_equal(g2(contiguous_slice), f(contiguous_slice))
    assert g2.stats().to_dict()["rebinds_by_argument"]["argument 0"] == 1
    assert sum(g.stats().to_dict()["copies_by_argument"].values()) >= 3


def test_new_arrays_each_call_and_threads():
    def f(x):
        return np.tanh(x) + 1

    g = graphed(f)

    def worker(seed):
        for i in range(30):
            x = rand(8 if i % 3 else 6, seed=seed * 100 + i)
            np.testing.assert_array_equal(g(x), f(x))

    errors = run_threads(worker, 4)
    assert not errors, errors[0]


def test_outputs_are_fresh_and_owned():
    g = graphed(lambda x: (x + 1, x * 2))
    x = rand(8)
    a1, b1 = g(x)
    a2, b2 = g(x + 1)
    assert not np.shares_memory(a1, a2) and not np.shares_memory(b1, b2)
    np.testing.assert_array_equal(a1, x + 1)
    np.testing.assert_array_equal(b2, (x + 1) * 2)


def test_view_mode_binds_inputs_not_outputs():
    g = graphed(lambda x: x + 1, output_mode="view")
    x = rand(8)
    for _ in range(2):  # the first call captures; the second replays
        np.testing.assert_array_equal(g(x), x + 1)
    counts = g.stats().to_dict()["rebinds_by_argument"]
    assert counts == {"argument 0": 1}


def test_evict_and_recapture_keeps_results_right():
    def f(x):
        return x - 1

    g = graphed(f, max_cached_graphs=1)
    for rows in (8, 4, 8, 3, 8):
        x = rand(rows, seed=rows)
        np.testing.assert_array_equal(g(x), f(x))
    assert g.stats().evictions >= 2


def test_piecewise_copies_like_the_gpu():
    @cg.graph_break
    def middle(x):
        return x * 2

    def f(x):
        return middle(x + 1) - 1

    g = graphed(f, mode="PIECEWISE")
    x = rand(8)
    np.testing.assert_array_equal(g(x), f(x))
    assert g.stats().to_dict()["rebinds_by_argument"] == {}


def test_debug_log_says_why_an_argument_is_copied(caplog):
    g = graphed(lambda x: x + 1)
    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        for _ in range(2):  # the first call captures; the second replays
            g(rand(16)[::2])
    assert any("argument 0 is copied" in r.getMessage() and "C-contiguous" in r.getMessage()
               for r in caplog.records)


def test_stats_reset_keeps_counting():
    g = graphed(lambda x: x + 1)
    g(rand(8))
    g.stats().reset()
    g(rand(8))
    assert g.stats().to_dict()["rebinds_by_argument"]["argument 0"] == 1


@pytest.mark.parametrize("binding", [{"input_binding": "copy"}, {}])
def test_same_array_twice_written_equals_eager(binding):
    # A regression test: copies of an array passed twice do not see each other's writes.
    def f(a, b):
        a *= 2
        return a + b

    g = cg.jit(f, config=dict(backend="host", capture_sizes=SIZES, **binding))
    for rows in (8, 6, 6, 8):
        x = rand(rows, seed=rows)
        want_x = x.copy()
        want = f(want_x, want_x)
        np.testing.assert_array_equal(g(x, x), want)
        np.testing.assert_array_equal(x, want_x)
    assert g.stats().fallbacks_by_reason["aliased_write"] >= 1  # (the calls that captured ran as they are)


# -- constants ------------------------------------------------------------------------------------


def scaled(x, w):
    return x * w + 1


def test_new_weights_of_the_same_layout_are_rebound_not_recaptured():
    g = graphed(scaled, constant_argnums=(1,))
    weights = [rand(1, seed=s)[0] for s in range(4)]
    for i in range(8):
        x, w = rand(8, seed=100 + i), weights[i % 4]
        np.testing.assert_array_equal(g(x, w), scaled(x, w))
    stats = g.stats()
    assert stats.captures == 1 and sum(stats.recaptures_by_reason.values()) == 0
    assert stats.rebinds_by_argument["argument 1"] == 7


def test_weights_of_another_layout_are_captured_again():
    g = graphed(lambda x, w: (x[:, :, None] * w).sum(axis=1), constant_argnums=(1,))
    w = rand(3, 3, seed=1)
    x = rand(8)
    for weight in (w, np.asfortranarray(w), w.T):
        np.testing.assert_array_equal(g(x, weight), (x[:, :, None] * weight).sum(axis=1))
    assert g.stats().captures == 2  # w.T has w's Fortran layout: that graph is rebound to it


def test_threads_with_their_own_weights():
    g = graphed(scaled, constant_argnums=(1,))

    def worker(seed):
        w = rand(1, seed=seed)[0]
        for i in range(40):
            x = rand(8 if i % 2 else 5, seed=seed * 1000 + i)
            np.testing.assert_array_equal(g(x, w), scaled(x, w))

    errors = run_threads(worker, 4)
    assert not errors, errors[0]
    assert g.stats().captures == 1  # one graph (5 rows pad to 8), its weights rebound between threads


def test_debug_log_says_why_at_capture(caplog):
    g = graphed(lambda x: x)  # the output is the input's static buffer
    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        g(rand(8))
    assert any("argument 0 is copied" in r.getMessage() and "an output of the function is a view of it"
               in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("binding", [{"input_binding": "copy"}, {}])
def test_read_only_arguments_may_overlap_and_still_replay(binding):
    # Only an argument the function writes into must not overlap another: two read-only ones are read
    # by the replay exactly as eagerly, so the call replays.
    def f(a, b, out):
        out[...] = a * b
        return out.sum(axis=1)

    g = cg.jit(f, config=dict(backend="host", capture_sizes=SIZES, **binding))
    for rows in (8, 4, 4, 8):  # exact sizes: the same array twice in a padded batch fails capture (a known limit)
        x, out, want_out = rand(rows, seed=rows), np.zeros((rows, 3)), np.zeros((rows, 3))
        want = f(x, x, want_out)
        np.testing.assert_array_equal(g(x, x, out), want)
        np.testing.assert_array_equal(out, want_out)
    assert "aliased_write" not in g.stats().fallbacks_by_reason and g.registry.num_graphs() == 2


def test_weights_bound_instead_of_recaptured_are_the_ones_a_later_capture_compares_with():
    # W1 captured, W2 bound to its graph, the graph evicted: W2 again is no "changed constant".
    g = cg.jit(lambda x, w: x * w, config=dict(backend="host", capture_sizes=[4], on_capture_error="raise"),
               constant_argnums=(1,))
    x, w1, w2 = rand(4, seed=1), rand(1, seed=2)[0], rand(1, seed=3)[0]
    g(x, w1)
    g(x, w2)
    assert g.stats().captures == 1 and g.stats().rebinds_by_argument["argument 1"] == 1
    g.registry.clear()
    np.testing.assert_array_equal(g(x, w2), x * w2)  # raised InputMismatchError before
    assert g.stats().recaptures_by_reason == {}


def test_an_aliased_write_names_the_callers_argument_positions():
    def shift(s, x, y):
        x += s
        return x + y

    g = cg.jit(shift, batch_argnums=(1, 2), config=dict(backend="host", capture_sizes=[4]))
    a, b = np.ones((4, 2)), np.ones((4, 2))
    g(2.0, a, b)
    c, d = np.ones((4, 2)), np.ones((4, 2))
    want = shift(2.0, d, d)  # eagerly the write shows through both names
    np.testing.assert_array_equal(g(2.0, c, c), want)
    assert g.stats().fallbacks_by_reason == {"aliased_write": 1}
    assert "argument 1 and argument 2 share memory" in g.stats().detail("aliased_write")  # not 0 and 1


def test_a_constant_bind_is_counted_once_per_new_array_not_per_replay():
    # README, "Zero-copy calls": a constant is read by address on every replay; rebinds_by_argument counts it
    # once per new array bound to the held graph, while a batched argument counts once per bound replay.
    f = graphed(lambda x, w: x * w, constant_argnums=1)
    weights = [np.full((1, 3), i + 1.0) for i in range(2)]
    for w in (weights[0], weights[0], weights[0], weights[1], weights[1]):
        f(np.ones((4, 3)), w)
    stats = f.stats()
    assert stats.captures == 1 and stats.hits == 4 and not stats.recaptures_by_reason
    assert stats.rebinds_by_argument["argument 0"] == 4
    assert stats.rebinds_by_argument["argument 1"] == 1
