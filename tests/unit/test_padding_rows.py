"""Padding must not make a valid batch fail (issue 27). ``pad_mode="edge"`` fills the padding rows with
copies of the last real row, so ops that accept every real row (np.linalg.inv, cholesky, solve, log)
accept the padding too; under the default ``"constant"`` a padded capture that raises where the same
call works at its real batch is reported as caused by the padding, with what to do."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.errors import CaptureError

HOST = {"backend": "host", "capture_sizes": [4, 8]}
UNROUTED = {**HOST, "route_library_calls": False}  # np.linalg.inv as CuPy's own: it raises on a singular matrix


def _valid_batch(n: int, seed: int = 0) -> np.ndarray:
    """``n`` well-conditioned symmetric positive definite 3x3 matrices."""
    m = np.random.default_rng(seed).standard_normal((n, 3, 3))
    return m @ np.swapaxes(m, -1, -2) + 3 * np.eye(3)


def _inv(a):
    return np.linalg.inv(a)


def test_a_padded_capture_that_fails_on_the_padding_says_so(caplog):
    graphed = cg.jit(_inv, config=UNROUTED)
    a = _valid_batch(3)
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        got = graphed(a)
    np.testing.assert_array_equal(got, np.linalg.inv(a))  # the eager call, at the real batch
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"raised_on_padding": 1}
    detail = stats.detail("raised_on_padding")
    for words in ("LinAlgError", "padded from 3 to 4 rows", "pad_value=0", "pad_mode='edge'", "capture_sizes"):
        assert words in detail, detail
    warned = [r.getMessage() for r in caplog.records if "runs eagerly" in r.getMessage()]
    assert len(warned) == 1 and "padding" in warned[0] and "Singular" in warned[0], warned
    graphed(_valid_batch(3, seed=1))  # the key stays eager, with the same reason
    assert graphed.stats().fallbacks_by_reason == {"raised_on_padding": 2}


def test_under_raise_the_error_says_the_padding_caused_it():
    graphed = cg.jit(_inv, config={**UNROUTED, "on_capture_error": "raise"})
    with pytest.raises(CaptureError, match=r"padding.*pad_mode='edge'"):
        graphed(_valid_batch(3))


def test_a_function_that_fails_at_its_real_batch_too_is_not_blamed_on_the_padding():
    graphed = cg.jit(_inv, config=HOST)
    singular = np.zeros((3, 3, 3))
    with pytest.raises(np.linalg.LinAlgError):  # the call runs as it is first: the function's own error
        graphed(singular)
    assert graphed.stats().fallbacks_by_reason == {} and graphed.registry.num_graphs() == 0


def test_an_unpadded_failing_capture_is_not_blamed_on_padding():
    graphed = cg.jit(_inv, config=HOST)
    a = _valid_batch(4)
    a[3] = 0  # exactly a capture size, no padding: the batch itself is singular
    with pytest.raises(np.linalg.LinAlgError):  # the call runs as it is first: the function's own error
        graphed(a)
    assert graphed.stats().fallbacks_by_reason == {} and graphed.registry.num_graphs() == 0


@pytest.mark.parametrize("op", ["inv", "cholesky", "solve"])
def test_edge_padding_lets_linalg_graph_breaks_replay_a_valid_batch(op):
    ops = {"inv": lambda a: np.linalg.inv(a), "cholesky": lambda a: np.linalg.cholesky(a),
           "solve": lambda a: np.linalg.solve(a, a[..., :1])}
    broken = cg.graph_break(ops[op])

    def pipeline(a):
        return broken(a * 1.0) + 0.0

    calls = ((3, 0), (3, 1), (5, 2), (4, 3), (3, 4))
    for pad_mode, fallbacks in (("constant", len(calls)), ("edge", 0)):  # constant: both keys fail on zeros
        graphed = cg.jit(pipeline, config={**HOST, "mode": "PIECEWISE", "pad_mode": pad_mode})
        for n, seed in calls:
            a = _valid_batch(n, seed)
            np.testing.assert_array_equal(graphed(a), pipeline(a))  # one matrix at a time: exact
        assert graphed.stats().fallbacks == fallbacks, (pad_mode, graphed.stats().fallbacks_by_reason)


def test_under_edge_padding_np_linalg_in_full_mode_is_refused_for_what_it_is():
    graphed = cg.jit(_inv, config={**UNROUTED, "pad_mode": "edge"})
    graphed(_valid_batch(3))
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"library_call": 1} and "cupygraph.linalg" in stats.detail("library_call")


def test_routed_np_linalg_needs_no_edge_padding():
    graphed = cg.jit(_inv, config=HOST)  # routed (docs/ROUTING.md): the zero padding matrix gives NaN, cut away
    for seed in range(3):
        a = _valid_batch(3, seed)
        np.testing.assert_array_equal(graphed(a), np.linalg.inv(a))  # one matrix at a time: exact
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits == 2 and graphed.stats().routed_calls


def test_cupygraph_linalg_needs_no_edge_padding():
    graphed = cg.jit(lambda a: cg.linalg.inv(a), config=HOST)  # a zero padding matrix fails alone, cut away
    for seed in range(3):
        a = _valid_batch(3, seed)
        np.testing.assert_allclose(graphed(a), np.linalg.inv(a), rtol=1e-12, atol=1e-12)
    assert graphed.stats().fallbacks == 0


def test_edge_padding_is_rewritten_for_every_padded_call():
    def column_sums(x):  # sees the padding rows: each of them a copy of the last real row
        return x.sum(axis=0, keepdims=True) + 0 * x[:1]

    graphed = cg.jit(column_sums, out_batched=False, config={**HOST, "pad_mode": "edge"})
    rng = np.random.default_rng(5)
    for i, n in enumerate((3, 3, 2, 3, 4, 3)):
        x = rng.integers(-9, 9, (n, 2)).astype(np.float64)  # integers: the sums are exact
        padded = 4 if n <= 4 else 8
        padding = 0 if i == 0 else padded - n  # the call that captures runs as it is, unpadded
        np.testing.assert_array_equal(graphed(x), column_sums(x) + padding * x[-1:])
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits >= 4


def test_edge_padding_keeps_log_of_positive_data_free_of_warnings():
    graphed = cg.jit(np.log, config={**HOST, "pad_mode": "edge"})
    with np.errstate(divide="raise"):  # a zero padding row would raise here
        for seed in range(3):
            x = np.random.default_rng(seed).uniform(0.5, 2.0, (3, 2))
            np.testing.assert_array_equal(graphed(x), np.log(x))
    assert graphed.stats().fallbacks == 0


def test_warmup_under_edge_padding_pads_the_examples_rows():
    broken = cg.graph_break(lambda a: np.linalg.inv(a))
    graphed = cg.jit(lambda a: broken(a) * 1.0, config={**HOST, "mode": "PIECEWISE", "pad_mode": "edge"})
    assert graphed.warmup(_valid_batch(3)) == 2  # sizes 8 and 4, from three valid matrices
    a = _valid_batch(5, seed=9)
    np.testing.assert_array_equal(graphed(a), np.linalg.inv(a))
    assert graphed.stats().fallbacks == 0


def test_pad_mode_is_a_checked_choice():
    assert cg.CUDAGraphConfig(pad_mode="EDGE").pad_mode == "edge"
    with pytest.raises(cg.ConfigError, match=r"pad_mode.*constant.*edge"):
        cg.CUDAGraphConfig(pad_mode="reflect")
