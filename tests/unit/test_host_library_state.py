"""The host reference binds what the GPU binds (zero-copy), so the statistics agree. Where the GPU's recording
holds library state (a cuBLAS/cuBLASLt/cuSOLVER handle and workspace, a generator's state, a cuFFT plan, a baked
upload's snapshot; ``backends/zerocopy/node_pointers.py``: ``CopyReason.LIBRARY_STATE``) it binds nothing of what
the library saw, and relays its arguments and outputs instead (``backends/relay.py``): copy kernels the library
never saw, which bind. Not for a function that writes into an argument, nor without warm-ups."""

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


def binds(fn, config=HOST, deterministic=True):
    graphed = cg.jit(fn, constant_argnums=1, config=config)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((4, 3))
        got = graphed(x, W)
        if deterministic:  # (a draw's values are the next draws of its generator, not the eager call's)
            np.testing.assert_array_equal(got, fn(x.copy(), W))  # the relayed replay is the eager call
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits == 3, stats.to_dict()
    return {label: n for label, n in stats.rebinds_by_argument.items() if n}


def test_a_function_holding_no_library_state_is_bound():
    assert binds(elementwise).get("argument 0") == 3  # the three replays read the caller's array


@pytest.mark.parametrize("name", sorted(HOLDS_STATE))
def test_library_state_binds_through_relays(name):
    assert binds(HOLDS_STATE[name], deterministic="random" not in name) == {"argument 0": 3, "output 0": 3}, name


def test_view_mode_relays_the_arguments_alone():
    assert binds(HOLDS_STATE["FFT"], {**HOST, "output_mode": "view"}) == {"argument 0": 3}


def test_without_warm_ups_nothing_is_relayed():
    assert binds(HOLDS_STATE["FFT"], {**HOST, "num_warmups": 0}) == {}


def test_a_function_writing_into_its_argument_is_not_relayed():
    def scaled_in_place(x, w):
        x *= 2.0  # the caller's array changes, as it does eagerly
        return np.fft.rfft(x, axis=1).real

    graphed = cg.jit(scaled_in_place, constant_argnums=1, config=HOST)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rng.standard_normal((4, 3))
        want_x = x.copy()
        want = scaled_in_place(want_x, W)
        got = graphed(x, W)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, want_x)
    assert {k: n for k, n in graphed.stats().rebinds_by_argument.items() if n} == {}


def test_arrays_above_the_relay_limit_are_not_relayed(monkeypatch):
    from cupygraph.backends import relay

    monkeypatch.setattr(relay, "RELAY_MAX_BYTES", 4 * 3 * 8 - 1)  # just below the (4, 3) float64 argument
    assert binds(HOLDS_STATE["FFT"]) == {"output 0": 3}  # the (4, 2) output fits, the argument does not


def calls_write_like_eager(graphed, fn, seed, calls=3):
    """``calls`` calls on fresh data, each equal to eager: its result, and the caller's array written as the
    eager call writes it."""
    rng = np.random.default_rng(seed)
    for i in range(calls):
        x = rng.standard_normal((4, 3))
        want_x = x.copy()
        want = fn(want_x, W)
        np.testing.assert_array_equal(graphed(x, W), want, err_msg=f"call {i}")
        np.testing.assert_array_equal(x, want_x, err_msg=f"call {i}: the caller's array")


def test_a_write_warmup_hid_behind_a_relay_reaches_the_caller_from_the_first_call():
    """``warmup()`` fills a batched argument with ``pad_value`` (0): ``x *= 2`` leaves it as it was, so no warm-up
    shows the write and the family relays; the function then writes the relay's internal copy (on the GPU too).
    The first replay on the caller's data compares that copy: the write shows, the family relays no more, and
    this call and every later one write the caller's array back from the copy, as the eager call would."""

    def scaled_then_transformed(x, w):
        x *= 2.0
        return np.fft.rfft(x, axis=1).real + w[0, 0]

    graphed = cg.jit(scaled_then_transformed, constant_argnums=1, config=HOST)
    assert graphed.warmup(np.zeros((4, 3)), W) == 1
    assert graphed.backend.relays.decided is True  # warmup()'s zeros showed nothing
    calls_write_like_eager(graphed, scaled_then_transformed, seed=2)  # x doubled, as eagerly
    assert graphed.backend.relays.decided is False
    assert graphed.stats().fallbacks == 0


def test_a_write_the_warm_ups_show_once_is_never_relayed():
    """``warmup()``'s zeros become 0.5 in the first warm-up, and stay 0.5 after: the write shows once, and the
    family never relays (the GPU twin: ``tests/gpu/test_relays_gpu.py``, whose retry behind relays compares the
    static buffers with what they held before the first capture)."""

    def clipped_then_transformed(x, w):
        np.clip(x, 0.5, 1.0, out=x)
        return np.abs(np.fft.rfft(x, axis=1)) + w[0, 0]

    graphed = cg.jit(clipped_then_transformed, constant_argnums=1, config=HOST)
    assert graphed.warmup(np.zeros((4, 3)), W) == 1
    calls_write_like_eager(graphed, clipped_then_transformed, seed=4)
    assert graphed.backend.relays.decided is False


def test_a_written_argument_too_large_to_relay_neither_blocks_relays_nor_loses_its_write(monkeypatch):
    """As on the GPU: only the arrays a relay would carry are compared; the larger written argument is
    copied, and the write-back brings its write to the caller, while the output binds through its relay."""
    from cupygraph.backends import relay

    monkeypatch.setattr(relay, "RELAY_MAX_BYTES", 4 * 3 * 8 - 1)  # the (4, 3) argument is too large

    def shifted_then_transformed(x, w):
        x += 1.0  # shows on warmup()'s zeros too
        return np.fft.rfft(x, axis=1).real

    graphed = cg.jit(shifted_then_transformed, constant_argnums=1, config=HOST)
    assert graphed.warmup(np.zeros((4, 3)), W) == 1  # captured from warm-ups that wrote the argument
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.standard_normal((4, 3))
        want_x = x.copy()
        want = shifted_then_transformed(want_x, W)
        np.testing.assert_array_equal(graphed(x, W), want)
        np.testing.assert_array_equal(x, want_x)
    assert graphed.backend.relays.decided is True
    bound = {k for k, n in graphed.stats().rebinds_by_argument.items() if n}
    assert bound == {"output 0"}, bound


def test_nothing_a_relay_could_carry_decides_nothing(monkeypatch):
    from cupygraph.backends import relay

    monkeypatch.setattr(relay, "RELAY_MAX_BYTES", 0)
    graphed = cg.jit(HOLDS_STATE["FFT"], constant_argnums=1, config=HOST)
    for _ in range(3):
        graphed(np.random.default_rng(6).standard_normal((4, 3)), W)
    assert graphed.backend.relays.decided is None  # as on the GPU, whose retry sees no relayable buffer
