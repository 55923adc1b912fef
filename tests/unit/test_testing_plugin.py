"""The pytest plugin: opt-in GPU markers, options that put back what they set, helpers and fixtures
(exercised on the host backend; plugin runs go through pytester, in this process)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

import numpy as np
import pytest

import cupygraph as cg
import cupygraph.backends
from cupygraph.config.defaults import set_default_config
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
        return x / float(x.sum())  # a device-to-host read: CuPy refuses it under capture

    with pytest.raises(pytest.fail.Exception, match=r"device-to-host read .* float\(\) of an array"):
        assert_capturable(refuses, np.ones((3, 2)), config=HOST)
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


def _plugin_args() -> list[str]:
    """Installed, pytest loads the plugin in every run (as in a user's project); a plain checkout
    has no entry point, so load it by name. Other installed plugins are left out: each in-process
    run re-imports them (hypothesis takes seconds) and they have no part in what is tested."""
    plugins = entry_points(group="pytest11")
    others = [arg for ep in plugins if ep.value != "cupygraph.testing" for arg in ("-p", f"no:{ep.name}")]
    installed = any(ep.value == "cupygraph.testing" for ep in plugins)
    return others + ([] if installed else ["-p", "cupygraph.testing"])


class _GpuProbe:
    """Stands in for ``cupygraph.backends.gpu_unavailable_reason``: no GPU, and counts the asks."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return "no GPU in this test"


GPU_TESTS = """
import pytest

@pytest.mark.gpu
def test_marked_gpu():
    pass

@pytest.mark.cupygraph_gpu
def test_marked_cupygraph_gpu():
    pass
"""


def test_a_project_that_does_not_opt_in_keeps_its_gpu_marker_and_cupy_is_not_probed(pytester, monkeypatch):
    probe = _GpuProbe()
    monkeypatch.setattr(cupygraph.backends, "gpu_unavailable_reason", probe)
    pytester.makepyfile(test_other="import pytest\n\n@pytest.mark.gpu\ndef test_theirs():\n    pass\n")
    result = pytester.runpytest(*_plugin_args(), "-rs")
    result.assert_outcomes(passed=1)
    assert probe.calls == 0


def test_opted_in_markers_skip_with_the_reason_where_no_gpu_is_usable(pytester, monkeypatch):
    probe = _GpuProbe()
    monkeypatch.setattr(cupygraph.backends, "gpu_unavailable_reason", probe)
    pytester.makepyfile(test_gpu=GPU_TESTS)
    # The plugin registers its own marker; a project's own `gpu` marker is left alone.
    markers = pytester.runpytest(*_plugin_args(), "--markers").stdout.str()
    assert "@pytest.mark.cupygraph_gpu: needs a CUDA GPU" in markers and "@pytest.mark.gpu:" not in markers
    result = pytester.runpytest(*_plugin_args(), "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*test_gpu.py:7: needs a CUDA GPU: no GPU in this test"])
    assert probe.calls == 1  # probed this time (once): a collected test asked for a GPU

    pytester.makeini("[pytest]\ncupygraph_gpu_marker = gpu\n")
    assert "@pytest.mark.gpu: needs a CUDA GPU" in pytester.runpytest(*_plugin_args(), "--markers").stdout.str()
    result = pytester.runpytest(*_plugin_args(), "-rs")
    result.assert_outcomes(skipped=2)
    assert result.stdout.str().count("needs a CUDA GPU: no GPU in this test") == 2


def test_a_bad_marker_name_in_the_ini_option_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\ncupygraph_gpu_marker = gpu-tests\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(*_plugin_args())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cupygraph_gpu_marker: 'gpu-tests' is not a marker name*"])


OPTION_TESTS = """
import os, numpy as np, cupygraph as cg

def test_default_config_and_disable():
    f = cg.jit(lambda x: x + 1)
    f(np.ones((3, 2)))
    print("MODE", f.config.mode.name, "SIZES", f.config.cudagraph_capture_sizes,
          "DISABLED", os.environ.get("CUPYGRAPH_DISABLE"))
"""


@pytest.mark.parametrize("disable_before", [None, "0"])
def test_options_apply_for_the_session_and_are_put_back(pytester, monkeypatch, disable_before):
    if disable_before is None:
        monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    else:
        monkeypatch.setenv("CUPYGRAPH_DISABLE", disable_before)
    mine = cg.CUDAGraphConfig(capture_sizes=[3], backend="host")
    previous = set_default_config(mine)
    try:
        pytester.makepyfile(test_sample=OPTION_TESTS)
        pytester.makefile(".yaml", cfg="mode: PIECEWISE\ncapture_sizes: [2, 4]\nbackend: host\n")
        result = pytester.runpytest(*_plugin_args(), "-s", "--cupygraph-config", "cfg.yaml")
        result.stdout.fnmatch_lines([f"*MODE PIECEWISE SIZES (2, 4) DISABLED {disable_before}*"])
        result = pytester.runpytest(*_plugin_args(), "-s", "--cupygraph-disable")
        result.stdout.fnmatch_lines(["*MODE NONE*DISABLED 1*"])
        # The session is over: the environment and the default config are what they were.
        assert os.environ.get("CUPYGRAPH_DISABLE") == disable_before
        after = cg.jit(lambda x: x)
        assert after.config.mode.name == "FULL" and after.config.cudagraph_capture_sizes == (3,)
    finally:
        set_default_config(previous)


def test_stats_merge_adds_every_counter():
    a, b = cg.CUDAGraphStats(), cg.CUDAGraphStats()
    a.record_hit("FULL")
    b.record_hit("FULL")
    b.record_fallback(cg.FallbackReason.COLD_KEY, "NONE", "cold key: seen 1 of capture_after=2 times")
    b.record_capture("PIECEWISE", 0.5)
    a.merge(b)
    assert (a.hits, a.misses, a.captures, a.capture_time_s) == (2, 1, 1, 0.5)
    assert a.replays_by_mode == {"FULL": 2} and a.fallbacks_by_reason == {"cold_key": 1}
    assert a.last_detail_by_reason == {"cold_key": "cold key: seen 1 of capture_after=2 times"}
    assert a.captures_by_mode == {"PIECEWISE": 1}
