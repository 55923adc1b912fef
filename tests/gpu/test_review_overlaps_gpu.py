"""Findings of the GPU-path review (review-gpu) on a real GPU: a bound call (``input_binding="auto"``, a batch of
exactly the captured rows) still copies an argument it cannot bind, so a write the function makes into a constant
that argument overlaps would not show through the copy. Each call equals eager CuPy bit for bit on fresh random
data with the static buffers poisoned first, and the caller's arrays are written as the eager call writes them."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers  # noqa: E402

ROWS, WIDTH = 8, 64


@pytest.fixture(autouse=True)
def _device():
    cupy.cuda.Device(0).use()


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


def writes_the_constant(x, w):
    w += 1
    return x * 2


@pytest.mark.parametrize("output_mode", ["copy", "view"])
def test_a_bound_call_whose_copied_argument_views_a_written_constant_equals_eager(output_mode):
    config = dict(backend="cupy", input_binding="auto", capture_sizes=[ROWS], output_mode=output_mode)
    g = cg.jit(writes_the_constant, config=config, constant_argnums=(1,))
    rng = np.random.default_rng(0)
    apart = rand(rng, ROWS, WIDTH), rand(rng, WIDTH)
    for _ in range(3):  # the call that captures writes the constant; then replays, bound
        g(*apart)
    mine = cupy.empty((ROWS, 2 * WIDTH), cupy.float32)
    theirs = cupy.empty_like(mine)
    for call in range(6):
        mine[...] = rand(rng, ROWS, 2 * WIDTH)
        theirs[...] = mine
        want = cupy.asnumpy(writes_the_constant(theirs[:, :WIDTH], theirs[0, :WIDTH]))
        poison_static_buffers(g, cupy)
        got = g(mine[:, :WIDTH], mine[0, :WIDTH])  # the batch is not contiguous (copied); the constant is its row 0
        np.testing.assert_array_equal(cupy.asnumpy(got), want, err_msg=f"call {call}")
        np.testing.assert_array_equal(cupy.asnumpy(mine), cupy.asnumpy(theirs), err_msg=f"call {call}")
    assert g.stats().fallbacks_by_reason["aliased_write"] > 0
