"""Static arguments are keyed by value; a key must equal itself, so NaN keys as NaN (every payload,
Python's and NumPy's floats, complex parts, inside tuples and frozensets, as keywords), and a
static value that never compares equal is reported instead of silently capturing a graph per call
(issue 27)."""

from __future__ import annotations

import logging
import math
import struct

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.cache.key import Kwargs, StaticArg

HOST = {"backend": "host", "capture_sizes": [4]}


def _nan_with_payload(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


NANS = {
    "float": lambda i: float("nan"),
    "payloads": lambda i: _nan_with_payload(i + 1) if i % 2 else -_nan_with_payload(i),
    "float64": lambda i: np.float64("nan"),
    "float32": lambda i: np.float32("nan"),
    "complex": lambda i: complex(float("nan"), 1.0),
    "tuple": lambda i: (1, (float("nan"), 2.0)),
    "frozenset": lambda i: frozenset({float("nan"), "a"}),
}


def _scaled(x, value=None):
    return x * 2


@pytest.mark.parametrize("kind", sorted(NANS))
def test_a_nan_static_argument_replays_one_graph(kind):
    graphed = cg.jit(_scaled, config=HOST)
    x = np.ones((3, 2))
    for i in range(50):
        np.testing.assert_array_equal(graphed(x, NANS[kind](i)), x * 2)
    stats = graphed.stats()
    assert graphed.registry.num_graphs() == 1 and stats.captures == 1 and stats.hits == 49


def test_a_nan_keyword_argument_replays_one_graph():
    graphed = cg.jit(_scaled, config=HOST)
    x = np.ones((3, 2))
    for _ in range(10):
        graphed(x, value=float("nan"))
    assert graphed.registry.num_graphs() == 1 and graphed.stats().hits == 9


def test_nan_keys_keep_types_and_other_values_apart():
    nan = float("nan")
    assert StaticArg(float, nan) == StaticArg(float, float("nan"))
    assert hash(StaticArg(float, nan)) == hash(StaticArg(float, _nan_with_payload(5)))
    assert StaticArg(float, nan) != StaticArg(np.float64, np.float64(nan))
    assert StaticArg(tuple, (nan, 1.0)) != StaticArg(tuple, (nan, 2.0))
    assert StaticArg(tuple, (nan,)) != StaticArg(tuple, (1.0,))
    assert StaticArg(complex, complex(nan, 1)) != StaticArg(complex, complex(1, nan))
    assert Kwargs((("a", float, nan),)) == Kwargs((("a", float, float("nan")),))
    assert StaticArg(float, 1.5) == StaticArg(float, 1.5) and StaticArg(float, 1.5) != StaticArg(float, 2.5)
    assert math.isnan(StaticArg(float, nan).value)  # what was passed is kept (messages show it)


class _NeverEqual:
    """A static value whose ``__eq__`` is never True (and hashes alike): each new one is a new key."""

    def __eq__(self, other):
        return False

    def __hash__(self):
        return 7


def test_a_static_argument_that_never_compares_equal_is_reported_once(caplog):
    graphed = cg.jit(_scaled, config=HOST)
    x = np.ones((3, 2))
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        for _ in range(6):
            graphed(x, _NeverEqual())
    warnings = [r.getMessage() for r in caplog.records if "never" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "_scaled()" in warnings[0] and "argument 1" in warnings[0] and "_NeverEqual" in warnings[0]
    stats = graphed.stats()
    assert stats.hits == 0 and stats.recaptures_by_reason["static_never_equal"] == 4  # captures 3 to 6


def test_new_objects_compared_by_identity_are_reported_too(caplog):
    class Settings:  # no __eq__: a new instance per call is a new key
        scale = 2

    graphed = cg.jit(_scaled, config=HOST)
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        for _ in range(3):
            graphed(np.ones((3, 2)), Settings())
    assert any("never" in r.getMessage() and "Settings" in r.getMessage() for r in caplog.records)


def test_static_values_that_repeat_are_not_reported(caplog):
    graphed = cg.jit(_scaled, config=HOST)
    x = np.ones((3, 2))
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        for i in range(12):
            graphed(x, i % 3)  # three values, each replayed
    assert not [r for r in caplog.records if "never" in r.getMessage()]
    assert graphed.stats().recaptures_by_reason["static_never_equal"] == 0


def test_distinct_functions_or_objects_of_other_contents_are_not_reported(caplog):
    class Scale:
        def __init__(self, k):
            self.k = k

    graphed = cg.jit(_scaled, config=HOST)
    x = np.ones((3, 2))
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        for value in (np.sin, np.cos, np.tan, abs, Scale(1), Scale(2), Scale(3)):
            graphed(x, value)  # really different values, each seen once so far
    assert not [r for r in caplog.records if "never" in r.getMessage()]
