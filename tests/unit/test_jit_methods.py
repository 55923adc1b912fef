"""``@cupygraph.jit`` on methods works as ``jax.jit`` on methods (issue 27): the jitted function is a
descriptor, ``obj.method(x)`` passes ``obj`` as argument 0 (a static argument: each instance keyed by
its hash and ``==``), and the function's helpers are reachable from the bound form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.api.methods import BoundFunction
from cupygraph.backends.fastpath.compiled import FastFunction
from cupygraph.errors import InputMismatchError

HOST = {"backend": "host", "capture_sizes": [4, 8]}


def _scaler_class() -> type:
    """A fresh class per test: its jitted functions (and their statistics) are the class's."""

    class Scaler:
        def __init__(self, k: float):
            self.k = k

        @cg.jit(batch_argnums=1, config=HOST)
        def scale(self, x):
            return x * self.k

        @staticmethod
        @cg.jit(config=HOST)
        def double(x):
            return x * 2

        @cg.jit(config=HOST)
        @staticmethod
        def triple(x):
            return x * 3

        @classmethod
        @cg.jit(batch_argnums=1, config=HOST)
        def negate(cls, x):
            return -x

    return Scaler


def test_a_method_is_called_with_its_instance_on_two_instances():
    Scaler = _scaler_class()
    a, b = Scaler(2.0), Scaler(3.0)
    x = np.arange(6.0).reshape(3, 2)
    for _ in range(3):
        np.testing.assert_array_equal(a.scale(x), x * 2.0)
        np.testing.assert_array_equal(b.scale(x), x * 3.0)
    stats = a.scale.stats()  # the function's statistics, from the bound form
    assert stats.to_dict() == b.scale.stats().to_dict() == Scaler.scale.stats().to_dict()
    assert Scaler.scale.registry.num_graphs() == 2  # self is static: one graph per instance
    assert stats.captures == 2 and stats.hits == 4 and stats.fallbacks == 0


def test_the_bound_form_reaches_the_functions_helpers():
    Scaler = _scaler_class()
    a = Scaler(2.0)
    bound = a.scale
    assert isinstance(bound, BoundFunction) and bound.__self__ is a and bound.__func__ is Scaler.scale
    assert bound.warmup(np.ones((3, 2))) == 2  # sizes 8 and 4, for this instance
    x = np.ones((5, 2))
    for _ in range(2):  # the first padded call of the key runs as it is (its outputs checked), then a hit
        np.testing.assert_array_equal(bound(x), x * 2.0)
    assert bound.stats().hits == 1 and bound.stats().captures == 2
    assert "scale" in bound.describe() and "a.scale" not in repr(bound)
    assert bound.config is Scaler.scale.config and bound.registry is Scaler.scale.registry
    out = bound.call_with_descriptor(cg.BatchDescriptor(8), np.ones((5, 2)))
    np.testing.assert_array_equal(out, np.full((5, 2), 2.0))
    bound.clear()
    assert Scaler.scale.registry.num_graphs() == 0


def test_warmup_of_a_bound_form_without_examples_uses_the_last_call_with_its_own_instance():
    Scaler = _scaler_class()
    a, b = Scaler(2.0), Scaler(3.0)
    a.scale(np.ones((3, 2)))  # the last call: a's
    assert b.scale.warmup(sizes=[8]) == 1
    before = Scaler.scale.stats().captures
    np.testing.assert_array_equal(b.scale(np.ones((6, 2))), np.full((6, 2), 3.0))
    assert Scaler.scale.stats().captures == before  # b's graph for 8 was captured by the warmup


def test_a_class_attribute_access_is_the_function_itself_and_takes_self_explicitly():
    Scaler = _scaler_class()
    a = Scaler(4.0)
    assert Scaler.scale.__get__(None, Scaler) is Scaler.scale
    np.testing.assert_array_equal(Scaler.scale(a, np.ones((3, 2))), np.full((3, 2), 4.0))


def test_static_and_class_methods():
    Scaler = _scaler_class()
    x = np.ones((3, 2))
    for target in (Scaler, Scaler(1.0)):
        np.testing.assert_array_equal(target.double(x), x * 2)
        np.testing.assert_array_equal(target.triple(x), x * 3)
        np.testing.assert_array_equal(target.negate(x), -x)
    assert Scaler.triple.stats().fallbacks == 0 and Scaler.negate.__self__ is Scaler


def test_classmethod_below_jit_is_refused_with_the_right_order():
    with pytest.raises(TypeError, match=r"put @classmethod above @cupygraph\.jit"):
        cg.jit(classmethod(lambda cls, x: x))


def test_default_batch_argnums_on_a_method_says_to_count_self():
    class Model:
        @cg.jit(config=HOST)
        def forward(self, x):
            return x + 1

    with pytest.raises(InputMismatchError, match=r"argument 0 of forward\(\) is self .*method of .*Model.*"
                                                 r"batch_argnums=1"):
        Model().forward(np.ones((3, 2)))


def test_an_unhashable_self_is_refused_with_the_fix():
    class Model:
        __eq__ = lambda self, other: self is other  # an __eq__ without __hash__: unhashable

        @cg.jit(batch_argnums=1, config=HOST)
        def forward(self, x):
            return x + 1

    with pytest.raises(InputMismatchError, match=r"unhashable Model.*__hash__ = object\.__hash__"):
        Model().forward(np.ones((3, 2)))


def test_arrays_read_through_self_are_reported_like_a_closures():
    class Layer:
        def __init__(self):
            self.w = np.full((2, 2), 0.5)

        @cg.jit(batch_argnums=1, config=HOST)
        def forward(self, x):
            return x * self.w[0]

    layer = Layer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(layer.forward(np.ones((3, 2))), np.full((3, 2), 0.5))
    assert any("self.w" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_a_plain_function_is_still_called_without_binding():
    graphed = cg.jit(lambda x: x + 1, config=HOST)
    assert isinstance(graphed, FastFunction) and type(graphed).__call__ is FastFunction.__call__
    np.testing.assert_array_equal(graphed(np.ones((3, 2))), np.full((3, 2), 2.0))


def test_debug_mode_refuses_a_replay_after_an_attribute_of_self_was_rebound():
    class Layer:
        def __init__(self):
            self.w = np.full(2, 0.5)

        @cg.jit(batch_argnums=1, config={**HOST, "debug": True})
        def forward(self, x):
            return x * self.w

    layer = Layer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)
        layer.forward(np.ones((3, 2)))
    layer.w = np.full(2, 2.0)  # a graph would still read the old array
    with pytest.raises(cg.ForeignMemoryError, match=r"self\.w"):
        layer.forward(np.ones((3, 2)))
