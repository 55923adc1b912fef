"""A jitted function called while another is being recorded runs inline (``cache.recording_here``): its kernels
join the outer graph, as ``jax.jit`` inlines a nested jit, and it captures nothing of its own there (its capture
would start inside the outer one's). Replays equal eager CuPy bit for bit on fresh random data with the static
buffers poisoned first."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_device0")]
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers  # noqa: E402

ROWS, WIDTH = 8, 256



@pytest.mark.parametrize("library", [False, True], ids=["elementwise", "fft inside"])
def test_a_nested_jit_is_inlined_into_the_outer_graph(library):
    config = dict(backend="cupy", capture_sizes=[ROWS])

    def inner_fn(x):
        y = cupy.tanh(x) * 2 + 1
        return cupy.abs(cupy.fft.rfft(y, axis=1))[:, :WIDTH // 4] if library else y

    inner = cg.jit(inner_fn, config=config)

    def outer_fn(x):
        return inner(x) - 3

    outer = cg.jit(outer_fn, config=config)
    rng = np.random.default_rng(11)
    buffers = [cupy.asarray(rng.standard_normal((ROWS, WIDTH)).astype(np.float32)) for _ in range(2)]
    for call in range(8):
        x = buffers[call % 2]
        x[...] = cupy.asarray(rng.standard_normal((ROWS, WIDTH)).astype(np.float32))
        want = cupy.asnumpy(inner_fn(x.copy()) - 3)
        poison_static_buffers(outer, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(outer(x)), want, err_msg=f"call {call}")
        if call == 0:
            inner_captures = inner.stats().captures  # the outer's first call runs as it is: inner plainly
    stats = outer.stats()
    assert stats.captures == 1 and stats.fallbacks == 0, stats.to_dict()
    assert inner.stats().captures == inner_captures  # nothing captured inside the outer's recording
    assert not cg.cache.recording_here()
