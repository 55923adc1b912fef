"""The pytest plugin: gpu marker, options, helpers and fixtures, exercised on the host backend."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.backends import gpu_unavailable_reason
from cupygraph.testing import assert_capturable, assert_graph_matches_eager

HOST = dict(backend="host", max_capture_size=32)


def test_assert_graph_matches_eager_passes_for_a_pure_function():
    graphed = assert_graph_matches_eager(lambda x, y: (x * y + 1, x.sum(axis=1)), np.ones((5, 3), np.float32),
                                         np.ones((5, 3), np.float32), batch_argnums=(0, 1), config=HOST,
                                         sizes=[1, 5, 17])
    assert graphed.stats().captures == 3 and graphed.stats().hits == 3


def test_assert_graph_matches_eager_catches_a_difference():
    state = {"calls": 0}

    def leaky(x):  # depends on hidden state: graph and eager disagree
        state["calls"] += 1
        return x + state["calls"]

    with pytest.raises(pytest.fail.Exception, match="differs from eager"):
        assert_graph_matches_eager(leaky, np.ones((4, 2)), config=HOST)


def test_assert_graph_matches_eager_reports_fallbacks():
    with pytest.raises(pytest.fail.Exception, match="ran eagerly"):
        assert_graph_matches_eager(lambda x: x + 1, np.ones((40, 2)), config=HOST, sizes=[40])


def test_assert_capturable_names_the_reason():
    def refuses(x):
        if x.shape[0] == 4:
            raise cg.CaptureError("device-to-host transfer during capture")
        return x

    with pytest.raises(pytest.fail.Exception, match="device-to-host"):
        assert_capturable(refuses, np.ones((3, 2)), config=dict(HOST, num_warmups=0))
    assert_capturable(lambda x: x * 2, np.ones((3, 2)), config=HOST)


def test_graph_stats_fixture_sees_only_this_tests_functions(graph_stats):
    f = cg.jit(lambda x: x + 1, config=HOST)
    f(np.ones((3, 2)))
    f(np.ones((3, 2)))
    assert [g.__name__ for g in graph_stats.functions()] == ["<lambda>"]
    total = graph_stats.total()
    assert (total.captures, total.hits, total.misses) == (1, 1, 1)


def test_leak_check_fixture_passes_when_clear_returns_everything(cupygraph_leak_check):
    f = cg.jit(lambda x: x * 3, config=HOST)
    assert f(np.ones((2, 2))).sum() == 12


def test_gpu_marker_skips_with_reason_and_options_work(pytester, monkeypatch):
    # --cupygraph-disable below sets CUPYGRAPH_DISABLE in this process; monkeypatch puts it back
    # (the plugin restoring it itself is issue 11's fix), so later tests in random order are unaffected.
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "")  # records the value before the test, for teardown
    monkeypatch.delenv("CUPYGRAPH_DISABLE")
    pytester.makepyfile(
        test_sample="""
        import os, numpy as np, pytest, cupygraph as cg

        @pytest.mark.gpu
        def test_needs_gpu():
            pass

        def test_default_config_and_disable():
            f = cg.jit(lambda x: x + 1)
            f(np.ones((3, 2)))
            print("MODE", f.config.mode.name, "SIZES", f.config.cudagraph_capture_sizes,
                  "DISABLED", os.environ.get("CUPYGRAPH_DISABLE"))
        """
    )
    pytester.makefile(".yaml", cfg="mode: PIECEWISE\ncapture_sizes: [2, 4]\nbackend: host\n")
    from importlib.metadata import entry_points

    installed = any(ep.value == "cupygraph.testing" for ep in entry_points(group="pytest11"))
    load = [] if installed else ["-p", "cupygraph.testing"]  # a plain checkout has no entry point
    result = pytester.runpytest(*load, "-rs", "-s", "--cupygraph-config", "cfg.yaml")
    result.stdout.fnmatch_lines(["*MODE PIECEWISE SIZES (2, 4)*"])
    if gpu_unavailable_reason() is None:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*needs a CUDA GPU: *"])
    result = pytester.runpytest(*load, "-s", "--cupygraph-disable")
    result.stdout.fnmatch_lines(["*MODE NONE*DISABLED 1*"])


def test_stats_merge_adds_every_counter():
    a, b = cg.CUDAGraphStats(), cg.CUDAGraphStats()
    a.record_hit("FULL")
    b.record_hit("FULL")
    b.record_fallback("cold key", "NONE")
    b.record_capture("PIECEWISE", 0.5)
    a.merge(b)
    assert (a.hits, a.misses, a.captures, a.capture_time_s) == (2, 1, 1, 0.5)
    assert a.replays_by_mode == {"FULL": 2} and a.fallbacks_by_reason == {"cold key": 1}
    assert a.captures_by_mode == {"PIECEWISE": 1}
