"""Findings of the GPU-path review (review-gpu) on a real GPU, under ``input_binding="auto"`` (a batch of exactly the
captured rows is bound):

* a bound call still copies an argument it cannot bind, so a write the function makes into a constant that argument
  overlaps would not show through the copy: such calls run eagerly (``aliased_write``);
* an ``output_mode="view"`` output passed back in lies in the graph's own memory, which the replay may write before
  it has read the argument: it is copied in, never bound.

Each call equals eager CuPy bit for bit on fresh random data with the static buffers poisoned first, and the
caller's arrays are written as the eager call writes them."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_device0")]
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers, randn32  # noqa: E402

ROWS, WIDTH = 8, 64



def rand(rng, *shape):
    return randn32(cupy, rng, *shape)


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


def differences(x):
    out = cupy.empty_like(x)
    out.fill(0)  # the output is written before the argument is read
    out[:, 1:] = x[:, 1:] - x[:, :-1]
    out[:, 0] = x[:, 0]
    return out


def test_a_view_output_passed_back_in_is_read_as_the_eager_call_reads_it():
    config = dict(backend="cupy", input_binding="auto", capture_sizes=[ROWS], output_mode="view")
    g = cg.jit(differences, config=config)
    rng = np.random.default_rng(1)
    for call in range(8):
        x = rand(rng, ROWS, WIDTH)
        once = differences(x.copy())
        twice = cupy.asnumpy(differences(once))
        poison_static_buffers(g, cupy)
        y = g(x)
        np.testing.assert_array_equal(cupy.asnumpy(y), cupy.asnumpy(once), err_msg=f"call {call}")
        z = g(y)  # y is the graph's own output memory (a view), which this replay writes
        np.testing.assert_array_equal(cupy.asnumpy(z), twice, err_msg=f"call {call}, passed back")
    assert g.stats().fallbacks == 0
    assert g.stats().rebinds_by_argument["argument 0"] > 0  # the caller's own arrays are still bound
