"""NVTX ranges around capture, replay, fallback and graph breaks (issue 17): checked against an
injected range provider; the real ``nvtx`` package where it is installed."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.backends.host.backend import HostBackend
from cupygraph.cache.instruments import ranges
from cupygraph.cache.instruments.hooks import Instruments

HOST = dict(backend="host", capture_sizes=[2, 4])


class Recorder:
    """A range provider that keeps what was pushed, and checks every push is popped."""

    def __init__(self):
        self.opened: list[str] = []
        self.depth = 0

    def push(self, message):
        self.opened.append(message)
        self.depth += 1

    def pop(self):
        assert self.depth > 0, "a range was popped that was never pushed"
        self.depth -= 1


def scale(x):
    return x * 2


def test_capture_replay_and_fallback_are_ranges_named_by_function_and_key():
    with ranges.use_provider(Recorder()) as recorder:
        f = cg.jit(scale, config=dict(HOST, nvtx=True))
    x = np.ones((3, 2))
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(f(np.ones((9, 2))), np.ones((9, 2)) * 2)  # above the largest size
    assert recorder.opened == [
        "cupygraph first call scale FULL size=4",  # the call that captures runs the function as it is
        "cupygraph capture scale FULL size=4",
        "cupygraph replay scale FULL size=4",
        "cupygraph eager scale: above_largest_capture_size",
    ]
    assert recorder.depth == 0


def test_the_environment_variable_turns_ranges_on(monkeypatch):
    monkeypatch.setenv("CUPYGRAPH_NVTX", "1")
    with ranges.use_provider(Recorder()) as recorder:
        f = cg.jit(scale, config=HOST)
    f(np.ones((2, 2)))
    assert recorder.opened == ["cupygraph first call scale FULL size=2", "cupygraph capture scale FULL size=2"]


def test_ranges_off_install_nothing_on_any_call_path():
    with ranges.use_provider(Recorder()) as recorder:
        f = cg.jit(scale, config=HOST)
    f(np.ones((2, 2)))
    f(np.ones((9, 2)))
    assert recorder.opened == [] and f.registry.instruments.ranges is None
    (entry,) = f.registry.entries()
    assert entry._hooked is None


def test_graph_breaks_between_pieces_get_their_own_range():
    def solve(a):
        return a

    class Recording:  # a PIECEWISE recording: a graph piece, the graph break ``solve``, a piece
        warmup_sample = None

        def __init__(self):
            self.steps = [lambda: None, lambda: None, lambda: None]

        def set_break_hook(self, hook):
            self.steps[1] = hook(solve, self.steps[1])

        def launch(self):
            for step in self.steps:
                step()

    class Entry:  # what Instruments.install uses of CUDAGraphEntry
        def __init__(self, recording):
            self.key = SimpleNamespace(mode=cg.CUDAGraphMode.PIECEWISE, descriptor=cg.BatchDescriptor(8))
            self.recording, self.capture_time, self.timing = recording, 0.0, None
            self.launch = recording.launch

        def set_hooks(self, hooks):
            for hook in hooks:
                self.launch = hook(self, self.launch)

    entry = Entry(Recording())
    with ranges.use_provider(Recorder()) as recorder:
        instruments = Instruments(cg.CUDAGraphConfig(backend="host", nvtx=True), HostBackend())
    instruments.install(entry, "pipeline")
    entry.launch()
    assert recorder.opened == ["cupygraph replay pipeline PIECEWISE size=8",
                               "cupygraph graph break solve in pipeline PIECEWISE size=8"]
    assert recorder.depth == 0


def test_a_range_is_closed_when_the_function_raises():
    def broken(x):
        raise ValueError("bug in the function")

    with ranges.use_provider(Recorder()) as recorder:
        f = cg.jit(broken, config=dict(HOST, nvtx=True))
    with pytest.raises(ValueError, match="bug in the function"):
        f(np.ones((2, 2)))
    assert recorder.depth == 0 and recorder.opened == ["cupygraph first call broken FULL size=2"]


def test_without_the_nvtx_package_ranges_are_off_with_one_warning(monkeypatch, caplog):
    try:
        import nvtx  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the nvtx package is installed here: the missing-package path cannot be shown")
    monkeypatch.setattr(ranges, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        f = cg.jit(scale, config=dict(HOST, nvtx=True))
        g = cg.jit(scale, config=dict(HOST, nvtx=True))
    assert f.registry.instruments.ranges is None and g.registry.instruments.ranges is None
    warnings = [r for r in caplog.records if "nvtx package is not installed" in r.getMessage()]
    assert len(warnings) == 1
    np.testing.assert_array_equal(f(np.ones((2, 2))), np.ones((2, 2)) * 2)


def test_the_real_nvtx_package_receives_the_ranges():
    pytest.importorskip("nvtx", reason="the optional nvtx package is not installed (pip install cupygraph[nvtx])")
    f = cg.jit(scale, config=dict(HOST, nvtx=True))
    assert isinstance(f.registry.instruments.ranges, ranges.NvtxRanges)
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(f(np.ones((9, 2))), np.ones((9, 2)) * 2)


def test_the_vllm_style_wrappers_eager_calls_get_the_same_range():
    with ranges.use_provider(Recorder()) as recorder:
        wrapper = cg.CUDAGraphWrapper(scale, cg.CUDAGraphMode.FULL, config=dict(HOST, mode="NONE", nvtx=True))
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(2)):
        np.testing.assert_array_equal(wrapper(np.ones((2, 2))), np.ones((2, 2)) * 2)
    assert recorder.opened == ["cupygraph eager scale: mode_none"] and recorder.depth == 0
