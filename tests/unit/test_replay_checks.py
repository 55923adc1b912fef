"""The host tests' "replay equals eager" checks can fail: a replay that returns stale outputs is caught.

A backend whose replay does nothing (outputs keep the capture's values) stands in for a stale
replay. Compared on the data it was captured with, such a replay looks right; the check used by
the host tests (poisoned outputs, new data) rejects it.
"""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import check_replay_follows_new_data

import cupygraph as cg


class StaleReplayBackend(cg.HostBackend):
    """A host backend whose replays forget to run: the outputs stay what the capture wrote."""

    def capture(self, fn, args, kwargs, **options):
        recording = super().capture(fn, args, kwargs, **options)
        recording.launch = lambda: None
        return recording


def stale_function(fn):
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", max_capture_size=8),
                                    backend=StaleReplayBackend())
    return cg.GraphedFunction(fn, registry=registry)


def fn(x):
    return x * 2 + 1


def test_a_check_on_the_capture_data_cannot_see_a_stale_replay():
    f = stale_function(fn)
    x = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(f(x), fn(x)) and np.array_equal(f(x), fn(x))  # passes although stale


def test_the_poisoned_new_data_check_catches_a_stale_replay():
    x, y = np.arange(6.0).reshape(3, 2), np.arange(6.0, 12.0).reshape(3, 2)
    with pytest.raises(AssertionError, match="differs from eager"):
        check_replay_follows_new_data(stale_function(fn), fn, (x,), (y,))
    check_replay_follows_new_data(cg.jit(fn, config=dict(backend="host", max_capture_size=8)), fn, (x,), (y,))
