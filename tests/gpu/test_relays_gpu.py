"""Relays on a real GPU (``backends/relay.py``): a graph that holds library state (cuBLASLt, cuFFT) or
copies its argument with a memcpy binds nothing by itself; recorded behind copy kernels, its argument and
output bind and the compiled replay serves its steady calls. Every call equals eager CuPy bit for bit on
fresh random data with the static buffers poisoned first (callers cycling among four buffers, padded
calls too); a function that writes into its argument gets no relays and still changes the caller's array
as the eager call does."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_device0")]
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers, randn32  # noqa: E402

from cupygraph.backends.fastpath.record import COMPILED  # noqa: E402

ROWS, WIDTH = 8, 256



def rand(rng, *shape):
    return randn32(cupy, rng, *shape)


def layers(rng):
    weights = [rand(rng, WIDTH, WIDTH) * np.float32(1 / 16) for _ in range(2)]
    biases = [rand(rng, WIDTH) * np.float32(0.1) for _ in range(2)]
    return weights, biases


def mlp(x, w0, b0, w1, b1):
    x = cg.linalg.linear(x, w0, b0, activation="relu")
    return cg.linalg.linear(x, w1, b1, activation="relu")


def fft_power(x):
    return cupy.abs(cupy.fft.rfft(x, axis=1)) ** 2


def copied_then_scaled(x):
    y = x.copy()  # a memcpy node reads the argument
    return y * 2 + 1


def jit(f, output_mode="copy", **options):
    config = dict(backend="cupy", input_binding="auto", capture_sizes=[ROWS], output_mode=output_mode)
    return cg.jit(f, config=config, **options)


def bound(g):
    return {label: n for label, n in g.stats().rebinds_by_argument.items() if n}


def run_cycling(g, f, params, calls=16, rows=ROWS):
    """``calls`` calls cycling over four caller buffers refilled with fresh data, each equal to eager."""
    rng = np.random.default_rng(rows)
    buffers = [rand(rng, rows, WIDTH) for _ in range(4)]
    for i in range(calls):
        x = buffers[i % 4]
        x[...] = rand(rng, rows, WIDTH)
        want = cupy.asnumpy(f(x.copy(), *params))
        poison_static_buffers(g, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(g(x, *params)), want, err_msg=f"call {i}")


@pytest.mark.parametrize("output_mode", ["copy", "view"])
def test_a_cublaslt_mlp_binds_through_relays_and_is_served_compiled(output_mode):
    weights, biases = layers(np.random.default_rng(0))
    params = (weights[0], biases[0], weights[1], biases[1])
    g = jit(mlp, output_mode=output_mode, constant_argnums=(1, 2, 3, 4))
    run_cycling(g, mlp, params)
    assert g.stats().fallbacks == 0
    want = {"argument 0"} | ({"output 0"} if output_mode == "copy" else set())
    assert set(bound(g)) == want, bound(g)
    [entry] = g.registry.entries()
    assert entry.strategy in ("bound", "bound_plain")
    if COMPILED:
        assert g.record is not None and g.record.served > 0  # steady calls never reach Python


def test_fft_and_a_memcpy_of_the_argument_bind_through_relays():
    for f in (fft_power, copied_then_scaled):
        g = jit(f)
        run_cycling(g, f, ())
        assert set(bound(g)) == {"argument 0", "output 0"}, (f.__name__, bound(g))


def test_padded_calls_read_the_static_buffer_through_the_relay():
    weights, biases = layers(np.random.default_rng(1))
    params = (weights[0], biases[0], weights[1], biases[1])
    g = jit(mlp, constant_argnums=(1, 2, 3, 4))
    run_cycling(g, mlp, params, calls=4)
    rng = np.random.default_rng(2)
    for rows in (3, ROWS, 5, ROWS):
        x = rand(rng, rows, WIDTH)
        padded = cupy.concatenate([x, cupy.zeros((ROWS - rows, WIDTH), cupy.float32)]) if rows < ROWS else x
        want = cupy.asnumpy(mlp(padded, *params)[:rows])  # a replay equals the padded eager call
        poison_static_buffers(g, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(g(x, *params)), want, err_msg=f"rows={rows}")


def test_a_function_writing_into_its_argument_gets_no_relays():
    def scaled_then_transformed(x):
        x *= 2  # the caller's array changes, as it does eagerly
        return cupy.abs(cupy.fft.rfft(x, axis=1))

    g = jit(scaled_then_transformed)
    rng = np.random.default_rng(3)
    for i in range(6):
        x = rand(rng, ROWS, WIDTH)
        want_x = x.copy()
        want = cupy.asnumpy(scaled_then_transformed(want_x))
        got = cupy.asnumpy(g(x))
        np.testing.assert_array_equal(got, want, err_msg=f"call {i}")
        np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(want_x), err_msg=f"call {i}")
    assert bound(g) == {}
    # The call that captured showed the write (cache/first_call.py), so no relay was even tried.
    assert g.backend.relays.decided is not True


def test_a_write_only_the_first_captures_warm_ups_showed_reaches_the_caller():
    """A capture without relays whose warm-ups wrote an argument is kept as it is (review rvA): relayed
    warm-ups would start from the written values, see no change from an idempotent write, and hide every
    later write in an internal copy."""
    def clipped_then_transformed(x):
        cupy.clip(x, 0.5, 1.0, out=x)  # warmup()'s zeros become 0.5 once; 0.5 stays 0.5
        return cupy.abs(cupy.fft.rfft(x, axis=1))

    g = jit(clipped_then_transformed)
    assert g.warmup(cupy.zeros((ROWS, WIDTH), cupy.float32)) == 1
    rng = np.random.default_rng(4)
    for i in range(3):
        x = rand(rng, ROWS, WIDTH)
        want_x = x.copy()
        want = cupy.asnumpy(clipped_then_transformed(want_x))
        np.testing.assert_array_equal(cupy.asnumpy(g(x)), want, err_msg=f"call {i}")
        np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(want_x), err_msg=f"call {i}: x not clipped")
    assert g.backend.relays.decided is False  # as on the host reference (tests/unit: the same function)


def calls_write_like_eager(g, f, rows, seed, calls=4):
    """``calls`` calls on fresh data (static buffers poisoned first), each equal to eager: its result, and the
    caller's array written as the eager call writes it."""
    rng = np.random.default_rng(seed)
    for i in range(calls):
        x = rand(rng, rows, WIDTH)
        want_x = x.copy()
        want = cupy.asnumpy(f(want_x))
        poison_static_buffers(g, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(g(x)), want, err_msg=f"call {i}")
        np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(want_x), err_msg=f"call {i}: the caller's array")


@pytest.mark.parametrize("output_mode", ["copy", "view"])
@pytest.mark.parametrize("rows", [3, ROWS])
def test_a_write_warmup_hid_behind_a_relay_reaches_the_caller(output_mode, rows):
    """``warmup()``'s zeros stay zeros under ``x *= 2``: no warm-up shows the write and the family relays, so the
    function writes the relay's internal copy. The first replay on the caller's data compares that copy with
    what the call brought (``cache/checks/writes.py``): the write shows there, the family relays no more, and
    this call and every later one write the caller's array back from the copy, padded or not."""

    def scaled_then_transformed(x):
        x *= 2
        return cupy.abs(cupy.fft.rfft(x, axis=1))

    g = jit(scaled_then_transformed, output_mode=output_mode)
    assert g.warmup(cupy.zeros((ROWS, WIDTH), cupy.float32)) == 1
    assert g.backend.relays.decided is True  # the zeros showed nothing
    calls_write_like_eager(g, scaled_then_transformed, rows, seed=5)
    assert g.backend.relays.decided is False
    assert g.stats().fallbacks == 0


@pytest.mark.parametrize("rows", [3, ROWS])
def test_a_write_warmup_hid_without_relays_reaches_the_caller(rows):
    """The same with nothing relayed (a plain kernel): padded calls copy the argument in, and the written rows
    go back to the caller; an unpadded call binds it and the graph writes it in place."""

    def relu_in_place(x):
        cupy.maximum(x, 0, out=x)
        return x * 3

    g = jit(relu_in_place)
    assert g.warmup(cupy.zeros((ROWS, WIDTH), cupy.float32)) == 1
    calls_write_like_eager(g, relu_in_place, rows, seed=6)
