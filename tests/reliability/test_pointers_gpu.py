"""Pointer and aliasing cases on the GPU (the host versions are in ``test_pointers.py``): each is
handled correctly, bit for bit against eager on fresh random data, or rejected naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from reliability_gpu import assert_same, rand  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402

import cupygraph as cg  # noqa: E402

CFG = dict(capture_sizes=[1, 2, 4, 8, 16])


@pytest.mark.parametrize("binding, captures", [("copy", 3), ("auto", 2)])
def test_constant_replaced_or_transposed_follows_the_array(binding, captures):
    rng = np.random.default_rng(0)
    fn = lambda x, w: x * w[0] + w[:, 0]  # elementwise, so bit for bit
    f = cg.jit(fn, config=dict(CFG, input_binding=binding), constant_argnums=(1,))
    x, w1, w2 = rand(rng, 3, 8), rand(rng, 8, 8), rand(rng, 8, 8)
    for w in (w1, w2, w1.T, w1, w1.T):  # w1.T: same address, shape and dtype; other strides
        assert_same(f(x, w), fn(x, w))
    # copy: w1, w2 and w1.T each captured; auto: w2 (same layout as w1) is bound to w1's graph instead.
    assert f.stats().captures == captures
    w1[...] = rand(rng, 8, 8)  # in place: the graph reads the new values
    assert_same(f(x, w1), fn(x, w1))
    check_stats(f, 6)


@pytest.mark.parametrize("output_mode", ["copy", "view"])
def test_function_returning_its_input(output_mode):
    rng = np.random.default_rng(1)
    f = cg.jit(lambda x: x, config=dict(CFG, output_mode=output_mode))
    for n in (3, 3, 8, 5):
        x = rand(rng, n, 16)
        hits = f.stats().hits
        out = f(x)
        assert_same(out, x)
        if f.stats().hits == hits:  # the call that captured (or checked) its key ran it as it is: x itself
            assert out is x
        else:
            assert out.data.ptr != x.data.ptr
    assert f.stats().hits == 1
    y = f(rand(rng, 3, 16))
    want = y.copy()
    assert_same(f(y), want)  # a view of the static input fed back in


def test_same_array_twice_and_arguments_written_by_the_function():
    rng = np.random.default_rng(2)
    fn = lambda a, b: a * 2 - b
    f = cg.jit(fn, config=CFG, batch_argnums=(0, 1))
    x = rand(rng, 5, 8)
    assert_same(f(x, x), fn(x, x))

    def writes(x):
        x *= 2
        return x + 1

    g = cg.jit(writes, config=CFG)
    x = rand(rng, 3, 8)
    xe = x.copy()
    assert_same(g(x), writes(xe))
    assert_same(x, xe)  # the caller's array changed, as eagerly: written back after the replay
    assert g.registry.num_graphs() == 1 and g.registry.entries()[0].written == (0,)
    x = rand(rng, 5, 8)
    xe = x.copy()
    assert_same(g(x), writes(xe))
    assert_same(x, xe)


@pytest.mark.parametrize("make", [
    lambda b: b[::2],
    lambda b: b[:, ::3],
    lambda b: b[::-1],
    lambda b: cupy.asfortranarray(b),
    lambda b: b[2:7],
    lambda b: cupy.broadcast_to(b[:1], b.shape),
], ids=["rows_step", "cols_step", "reversed", "fortran", "offset", "broadcast"])
def test_non_contiguous_inputs(make):
    rng = np.random.default_rng(3)
    fn = lambda x: cupy.sin(x) * 2 + 1
    f = cg.jit(fn, config=CFG)
    x = make(rand(rng, 12, 9))
    for _ in range(2):
        assert_same(f(x), fn(cupy.ascontiguousarray(x)))


def test_zero_size_trailing_dims_zero_d_arguments_and_empty_batches():
    rng = np.random.default_rng(4)
    f = cg.jit(lambda x: x * 2, config=CFG)
    for n in (3, 3, 8):
        assert f(cupy.ones((n, 0), dtype=cupy.float32)).shape == (n, 0)
    g = cg.jit(lambda x, s: x * s, config=CFG)
    for s in (2.0, 5.0):
        x = rand(rng, 3, 4)
        assert_same(g(x, cupy.asarray(np.float32(s))), x * np.float32(s))
    assert f(cupy.ones((0, 3), dtype=cupy.float32)).shape == (0, 3)
    assert "empty_batch" in f.stats().fallbacks_by_reason
    with pytest.raises(cg.InputMismatchError, match=r"argument 0 .* 0-d array"):
        f(cupy.asarray(1.0))
    with pytest.raises(cg.InputMismatchError, match=r"argument 0 .* numpy\.ndarray"):
        f(np.ones((3, 2), dtype=np.float32))
    record("pointers", "gpu pointer and aliasing cases", backend="cupy", cases=16)
