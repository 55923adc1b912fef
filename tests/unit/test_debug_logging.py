"""``debug=True`` output belongs to the function that asked for it (issue 27): making such a function
changes no logging state, its calls' decisions go to stderr, and other functions' do not."""

from __future__ import annotations

import logging
import threading

import numpy as np

import cupygraph as cg

HOST = {"backend": "host", "capture_sizes": [4, 8]}


def _logging_state() -> tuple:
    cupygraph_logger = logging.getLogger("cupygraph")
    return (cupygraph_logger.level, list(cupygraph_logger.handlers), logging.root.level, list(logging.root.handlers),
            sorted(logging.root.manager.loggerDict))


def test_making_a_debug_function_changes_no_logging_state():
    before = _logging_state()
    graphed = cg.jit(lambda x: x + 1, config={**HOST, "debug": True})
    graphed(np.ones((3, 2)))
    assert _logging_state() == before
    assert not logging.getLogger("cupygraph").isEnabledFor(logging.DEBUG)


def watched(x):
    return x * 2


def quiet(x):
    return x - 1


def _debugged_and_quiet():
    """A ``debug=True`` function and one without, on the host backend: whose lines reach stderr."""
    return cg.jit(watched, config={**HOST, "debug": True}), cg.jit(quiet, config=HOST)


def test_only_the_debug_functions_decisions_reach_stderr(capsys):
    debugged, other = _debugged_and_quiet()
    for n in (3, 5, 3):
        other(np.ones((n, 2)))
        debugged(np.ones((n, 2)))
        other(np.ones((n, 2)))
    lines = capsys.readouterr().err.splitlines()
    assert any("watched() captures" in line for line in lines), lines
    assert all("watched()" in line for line in lines), lines
    assert not any("quiet" in line for line in lines), lines


def test_a_debug_functions_calls_in_another_thread_do_not_open_this_threads_log(capsys):
    debugged, other = _debugged_and_quiet()
    start, done = threading.Event(), threading.Event()

    def keep_calling():
        try:
            debugged(np.ones((3, 2)))  # captures: its decisions logged from this thread
        finally:
            start.set()  # (a failure above must not leave this thread waiting forever)
        while not done.is_set():
            debugged(np.ones((3, 2)))

    thread = threading.Thread(target=keep_calling)
    thread.start()
    try:
        assert start.wait(timeout=60), "the debug function's first call never returned"
        for n in range(1, 9):
            other(np.ones((n, 2)))  # its captures' debug lines must not go to the other thread's log
    finally:
        done.set()
        thread.join()
    err = capsys.readouterr().err
    assert "watched() captures" in err and "quiet" not in err
    assert other.stats().captures == 2


def test_with_process_wide_debug_logging_every_function_logs_there_once(caplog, capsys):
    debugged = cg.jit(lambda x: x * 2, config={**HOST, "debug": True})
    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        debugged(np.ones((3, 2)))
    captures = [r for r in caplog.records if "captures" in r.getMessage()]
    assert captures and captures[0].module == "recaptures"  # a record names the module that logged it
    assert "captures" not in capsys.readouterr().err  # the process's handlers got it: not written twice
