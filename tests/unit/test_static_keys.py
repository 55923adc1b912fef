"""Static arguments are keyed by value; a key must equal itself, so NaN keys as NaN (every payload,
Python's and NumPy's floats, complex parts, inside tuples and frozensets, as keywords), and a
static value that never compares equal is reported instead of silently capturing a graph per call
(issue 27). Values that are equal but trace otherwise ((2,) and (2.0,), 0.0 and -0.0) are other keys,
on the slow path, the shortcuts and the compiled record alike."""

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


# Values that compare equal but trace differently: the element types of a tuple or frozenset (``x * k[0]``
# is int32 with ``(2,)`` and float64 with ``(2.0,)``) and the sign of a zero (``1 / k`` is inf or -inf).
EQUAL_BUT_DIFFERENT = {
    "tuple of int, of float": ((2,), (2.0,)),
    "tuple of NumPy int, of NumPy float": ((np.int32(2),), (np.float64(2),)),
    "nested tuple": (((1, (2,)),), ((1, (2.0,)),)),
    "frozenset": (frozenset({2}), frozenset({2.0})),
    "0.0 and -0.0": (0.0, -0.0),
    "NumPy 0.0 and -0.0": (np.float32(0.0), np.float32(-0.0)),
    "complex with 0.0 and -0.0 parts": (complex(1.0, 0.0), complex(1.0, -0.0)),
    "tuple of 0.0, of -0.0": ((0.0,), (-0.0,)),
}


def _first_part(x, k):
    first = k
    while isinstance(first, (tuple, frozenset)):
        first = next(iter(first))
    return x * first, np.divide(x + 1, first)


@pytest.mark.parametrize("case", sorted(EQUAL_BUT_DIFFERENT))
@pytest.mark.parametrize("as_keyword", [False, True])
def test_static_values_equal_but_of_other_types_or_signs_never_share_a_graph(case, as_keyword):
    def plain(x, k):
        return _first_part(x, k)

    def by_keyword(x, *, k):
        return _first_part(x, k)

    graphed = (cg.jit(by_keyword, config=HOST) if as_keyword
               else cg.jit(plain, config=HOST, static_argnums=(1,)))
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in EQUAL_BUT_DIFFERENT[case] * 3:
            got = graphed(x, k=k) if as_keyword else graphed(x, k)
            want = plain(x, k)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype, (case, k)
                for part in (np.real, np.imag):
                    np.testing.assert_array_equal(np.signbit(part(g)), np.signbit(part(w)), err_msg=f"{case}: {k!r}")
                np.testing.assert_array_equal(g, w)
    assert graphed.registry.num_graphs() == 2


def test_equal_values_of_other_types_or_signs_are_other_keys():
    for a, b in EQUAL_BUT_DIFFERENT.values():
        assert StaticArg(type(a), a) != StaticArg(type(b), b), (a, b)
        assert Kwargs((("k", type(a), a),)) != Kwargs((("k", type(b), b),)), (a, b)
    assert StaticArg(tuple, (2, "a")) == StaticArg(tuple, (2, "a"))
    assert hash(StaticArg(tuple, (0.0, (1,)))) == hash(StaticArg(tuple, (0.0, (1,))))


@pytest.mark.parametrize("case", sorted(EQUAL_BUT_DIFFERENT))
def test_a_compiled_record_is_asked_only_for_values_its_comparison_tells_apart(case):
    # A compiled record (GPU) compares a static value by type, then a float's value and zero sign and a
    # tuple's items one by one, else by ``==`` (tests/unit/test_compiled_replay_signatures.py drives it):
    # a value whose ``==`` hides what keys it otherwise (a NumPy zero's sign, a frozenset's item types) gets none.
    from types import SimpleNamespace

    from cupygraph.api.shortcuts import Shortcut, Shortcuts
    from cupygraph.cache import compared_exactly

    shortcuts = Shortcuts(np.ndarray, ())
    shortcut = Shortcut(SimpleNamespace(constants_token=None), "FULL", (0,), ())
    x = np.ones((4, 2))
    assert shortcuts.signature(shortcut, (x, 3)) == (0, ("equal", int, 3))
    for value in EQUAL_BUT_DIFFERENT[case]:
        if compared_exactly(value):
            assert shortcuts.signature(shortcut, (x, value)) == (0, ("equal", type(value), value))
        else:
            with pytest.raises(ValueError, match="static argument 1"):
                shortcuts.signature(shortcut, (x, value))
    exact = {"tuple of int, of float", "nested tuple", "0.0 and -0.0", "complex with 0.0 and -0.0 parts",
             "tuple of 0.0, of -0.0"}
    assert all(compared_exactly(v) for v in EQUAL_BUT_DIFFERENT[case]) is (case in exact)
