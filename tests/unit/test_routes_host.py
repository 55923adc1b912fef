"""CuPy code as users write it (issue 29) on the host reference: what the GPU routes, the host lets through.

The GPU routes CuPy's products (``x @ w``, ``dot``, ``tensordot``, ``einsum``, ...) to cupygraph's cuBLAS
handles while a function is recorded (``routes/cupy_libraries.py``); the host reference captures the same
NumPy code, notes the same routed calls, and still refuses what the GPU refuses (``polyfit`` solves with
cuSOLVER). The switch is the config's ``route_library_calls`` and ``CUPYGRAPH_ROUTE_LIBRARY_CALLS``.
"""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import AsItIs, eager_at_padded_size

import cupygraph as cg
from cupygraph.backends.routing import note_routed, routing_enabled, routing_policy

HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8]}


def mlp(x, w1, w2):
    return np.tanh(x @ w1).dot(w2)


@pytest.mark.parametrize("fn", [
    mlp,
    lambda x, w1, w2: np.tensordot(np.einsum("bi,ij->bj", x, w1), w2, axes=1),
    lambda x, w1, w2: np.inner(np.matmul(x, w1), w2.T) + np.dot(x, w1)[:, :1],
])
def test_unchanged_products_capture_and_replay_as_the_plain_function(fn):
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    graphed = cg.jit(fn, constant_argnums=(1, 2), config=HOST)
    as_it_is = AsItIs(graphed)
    for n in (8, 3, 8, 5, 3):
        x = rng.standard_normal((n, 6))
        plain = as_it_is(x, w1, w2)
        got = graphed(x, w1, w2)
        want = fn(x, w1, w2) if plain else eager_at_padded_size(graphed, x, w1, w2)
        np.testing.assert_array_equal(got, want)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.hits >= 2
    assert stats.routed_calls and all(call.startswith("cuBLAS (at test_routes_host.py:") for call in stats.routed_calls)
    assert set(stats.routed_calls.values()) == {graphed.registry.num_graphs()}  # each graph routed each call
    assert "library calls routed" in graphed.describe()


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_refuses_the_products_naming_the_line(switch, monkeypatch):
    config = dict(HOST)
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "off")
    graphed = cg.jit(mlp, constant_argnums=(1, 2), config=config)
    rng = np.random.default_rng(1)
    x, w1, w2 = rng.standard_normal((8, 6)), rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    np.testing.assert_array_equal(graphed(x, w1, w2), mlp(x, w1, w2))
    stats = graphed.stats()
    assert stats.fallbacks == 1 and not stats.routed_calls
    assert "test_routes_host.py" in stats.detail("library_call") and "cuBLAS" in stats.detail("library_call")


def test_what_the_gpu_does_not_route_is_still_refused():
    graphed = cg.jit(lambda x: np.polyfit(np.arange(x.shape[0], dtype=float), x, 1), config=HOST)
    graphed(np.random.default_rng(2).standard_normal(8))
    assert graphed.stats().fallbacks == 1 and "cuBLAS" in graphed.stats().detail("library_call")


def test_the_policy_is_per_thread_and_off_outside_a_recording():
    import threading

    assert not routing_enabled()
    note_routed("nowhere")  # outside a recording: no ledger, nothing happens
    seen = {}
    with routing_policy(True) as routed:
        note_routed("here")
        thread = threading.Thread(target=lambda: seen.setdefault("other", routing_enabled()))
        thread.start()
        thread.join()
        assert routing_enabled()
        with routing_policy(False) as inner:
            assert not routing_enabled() and inner == []
        assert routing_enabled()
    assert routed == ["here"] and seen == {"other": False} and not routing_enabled()
