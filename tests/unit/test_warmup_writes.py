"""Writes ``warmup()``'s fill hides: it fills batched arguments with ``pad_value`` (0), so a write that keeps zeros
zero (``x *= 2``, an in-place ReLU) shows in no warm-up. The first replay on a caller's data checks again
(``cache/checks/writes.py``), so the caller's array is written as the eager call would write it, padded or not,
copied or bound. On the host reference; the GPU twin is ``tests/gpu/test_relays_gpu.py``."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg


def doubled_in_place(x):
    x *= 2.0
    return x.sum(axis=1)


def relu_in_place(x):
    np.maximum(x, 0.0, out=x)
    return x * 3.0


def config(binding):
    return {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8], "input_binding": binding}


@pytest.mark.parametrize("binding", ["copy", "auto"])
@pytest.mark.parametrize("fn", [doubled_in_place, relu_in_place], ids=lambda f: f.__name__)
@pytest.mark.parametrize("rows", [3, 4, 8], ids=lambda r: f"{r}rows")
def test_a_write_warmup_could_not_see_reaches_the_callers_array(fn, binding, rows):
    graphed = cg.jit(fn, config=config(binding))
    assert graphed.warmup(np.zeros((8, 5))) == 2
    rng = np.random.default_rng(rows)
    for i in range(3):
        x = rng.standard_normal((rows, 5))
        want_x = x.copy()
        want = fn(want_x)
        np.testing.assert_array_equal(graphed(x), want, err_msg=f"call {i}")
        np.testing.assert_array_equal(x, want_x, err_msg=f"call {i}: the caller's array")
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.captures == 2, stats.to_dict()


def test_a_function_that_writes_nothing_keeps_zero_copy_after_warmup():
    def scaled(x):
        return x * 2.0

    graphed = cg.jit(scaled, config=config("auto"))
    assert graphed.warmup(np.zeros((4, 5))) == 2
    rng = np.random.default_rng(9)
    for _ in range(4):
        x = rng.standard_normal((4, 5))
        before = x.copy()
        np.testing.assert_array_equal(graphed(x), scaled(before))
        np.testing.assert_array_equal(x, before)
    # The first call's check runs on the static buffers; every later one binds the caller's array.
    assert graphed.stats().rebinds_by_argument.get("argument 0") == 3
