"""A function that writes into its arguments, captured with no warm-up, on a real GPU.

A CUDA stream capture executes nothing, so under ``num_warmups=0`` the capture cannot see that the
function writes into its copied arguments: the call that captures, which runs the function as it
is, shows it (or, where that run changed no byte, the first replay checks), and every call changes
the caller's arrays as the eager call would. Compared with eager on fresh random data, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

CFG = dict(backend="cupy", capture_sizes=[4, 8], num_warmups=0)


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


def assert_same(got, want) -> None:
    got, want = cupy.asnumpy(got), cupy.asnumpy(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def scale_and_shift(x, bias):
    x *= 2  # a batched argument
    bias += 1  # an unbatched one, copied whole
    return cupy.tanh(x) + bias


def test_writes_into_arguments_reach_the_caller_without_warmups():
    rng = np.random.default_rng(21)
    with cupy.cuda.Device(0):
        f = cg.jit(scale_and_shift, config=CFG)
        for rows in (3, 3, 7, 8, 2, 7):  # first calls of two sizes, then replays of each
            x, bias = rand(rng, rows, 64), rand(rng, 64)
            xe, be = x.copy(), bias.copy()
            want = scale_and_shift(xe, be)
            got = f(x, bias)
            assert_same(got, want)
            assert_same(x, xe)  # changed once, as eagerly
            assert_same(bias, be)
        assert f.registry.num_graphs() == 2
        assert all(entry.written == (0, 1) for entry in f.registry.entries())
        assert f.stats().fallbacks_by_reason == {}


def test_a_function_that_writes_nothing_keeps_its_arguments_without_warmups():
    rng = np.random.default_rng(22)
    with cupy.cuda.Device(0):
        f = cg.jit(lambda x: cupy.tanh(x) * 3, config=CFG)
        for rows in (3, 3, 5):
            x = rand(rng, rows, 64)
            before = x.copy()
            assert_same(f(x), cupy.tanh(before) * 3)
            assert_same(x, before)
        assert [entry.written for entry in f.registry.entries()] == [(), ()]  # graphs for 4 and 8 rows


def test_writes_into_a_copied_argument_reach_the_caller_at_a_capture_size():
    """At a capture size the arguments are bound (zero-copy) except one of another layout, which is
    copied in: the function's write into it must still come back to the caller, as eagerly, although
    no warm-up (num_warmups=0) ran on the static copies."""
    rng = np.random.default_rng(23)
    with cupy.cuda.Device(0):
        f = cg.jit(scale_and_shift, config=CFG)
        for _ in range(4):
            x, bias = rand(rng, 8, 128)[:, ::2], rand(rng, 64)  # x strided: copied; bias bound
            xe, be = x.copy(), bias.copy()
            want = scale_and_shift(xe, be)
            got = f(x, bias)
            assert_same(got, want)
            assert_same(x, xe)
            assert_same(bias, be)
        assert [entry.written for entry in f.registry.entries()] == [(0, 1)]
        assert f.stats().fallbacks_by_reason == {}
