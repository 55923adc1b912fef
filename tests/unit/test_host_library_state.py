"""The host reference binds what the GPU binds (zero-copy): nothing, where the GPU's recording holds library
state (a cuBLAS/cuBLASLt/cuSOLVER handle and workspace, a generator's state, a cuFFT plan, a baked upload's snapshot;
``backends/zerocopy/node_pointers.py``: ``CopyReason.LIBRARY_STATE``), so the statistics agree."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4], "input_binding": "auto"}


@pytest.fixture(autouse=True)
def numpy_global_state_kept():
    """A routed legacy draw seeds its generator from np.random's global state: put it back afterwards."""
    state = np.random.get_state()
    yield
    np.random.set_state(state)
W = np.arange(12.0).reshape(3, 4) / 10


def elementwise(x, w):
    return np.tanh(x) * 2 + w[0, 0]


HOLDS_STATE = {
    "routed product": lambda x, w: x @ w,
    "cupygraph.matmul": lambda x, w: cg.matmul(x, w),
    "cupygraph.linalg.linear (cuBLASLt)": lambda x, w: cg.linalg.linear(x, w, w[0], activation="relu"),
    "cupygraph.random": lambda x, w: x + cg.random.default_rng(0).standard_normal(x.shape),
    "legacy random, routed": lambda x, w: x + np.random.standard_normal(x.shape),
    "FFT": lambda x, w: np.fft.rfft(x, axis=1).real,
    "baked upload": lambda x, w: x * np.asarray([1.0, 2.0, 3.0]),
}


def binds(fn):
    graphed = cg.jit(fn, constant_argnums=1, config=HOST)
    rng = np.random.default_rng(0)
    for _ in range(4):
        graphed(rng.standard_normal((4, 3)), W)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits == 3, stats.to_dict()
    return stats.rebinds_by_argument


def test_a_function_holding_no_library_state_is_bound():
    assert binds(elementwise).get("argument 0") == 3  # the three replays read the caller's array


@pytest.mark.parametrize("name", sorted(HOLDS_STATE))
def test_a_function_whose_gpu_recording_holds_library_state_binds_nothing(name):
    assert binds(HOLDS_STATE[name]) == {}, name
