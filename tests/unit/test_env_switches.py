"""Environment switches (CUPYGRAPH_DISABLE, CUPYGRAPH_NVTX, CUPYGRAPH_PROGRESS, CUPYGRAPH_ROUTE_LIBRARY_CALLS)
read one way: 1/true/yes/on or 0/false/no/off (any case); anything else is warned about, naming the variable and the
values it takes, and the switch keeps its default: a typo of "false" must not turn graphs off."""

from __future__ import annotations

import warnings

import pytest

from cupygraph.config import defaults as config_defaults
from cupygraph.config.model import CUDAGraphConfig


@pytest.mark.parametrize("value", ["flase", "2", "enable", "tru"])
def test_an_unreadable_disable_switch_is_warned_about_and_leaves_graphs_on(monkeypatch, value):
    monkeypatch.setattr(config_defaults, "_DISABLE_LOGGED", True)
    monkeypatch.setenv("CUPYGRAPH_DISABLE", value)
    with pytest.warns(UserWarning, match=rf"CUPYGRAPH_DISABLE='{value}' is not a switch; use 1, true, yes or on, "
                                         rf"or 0, false, no or off; left at its default \(off\)"):
        assert config_defaults.graphs_disabled_by_env() is False


@pytest.mark.parametrize("value, routes", [("0", False), ("Off", False), ("1", True), ("", True), ("yes", True)])
def test_route_library_calls_switch_reads_the_same_words(monkeypatch, value, routes):
    monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config_defaults.routes_library_calls(CUDAGraphConfig()) is routes


def test_an_unreadable_route_switch_is_warned_about_and_keeps_routing(monkeypatch):
    monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "of")
    with pytest.warns(UserWarning, match=r"CUPYGRAPH_ROUTE_LIBRARY_CALLS='of' is not a switch; .* default \(on\)"):
        assert config_defaults.routes_library_calls(CUDAGraphConfig()) is True


@pytest.mark.parametrize("value, shown", [("0", False), ("off", False), ("1", True), ("", True), ("no", False)])
def test_the_progress_switch_reads_the_same_words(monkeypatch, value, shown):
    import sys

    from cupygraph.api import warmup

    monkeypatch.setenv("CUPYGRAPH_PROGRESS", value)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: only the switch decides
    bar = warmup.progress_bar(3, "probe", enabled=True)
    try:
        assert (bar is not None) is shown
    finally:
        if bar is not None:
            bar.close()
