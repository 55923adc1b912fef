"""The host reference refuses the escapes NumPy gives no hook for, and allows what CuPy captures.

* ``np.asarray(x)`` / ``np.array(x)`` / ``np.ascontiguousarray(x)`` of a captured array mirror
  ``cupy.asarray(x)`` (no copy to the host): the result stays guarded, so ``float(np.asarray(x.sum()))``
  is refused where the value reaches the host, and plain array arithmetic on it is captured;
* NumPy's legacy ``np.random.*`` that the GPU does not route: CuPy's legacy ``cupy.random.*``
  (cuRAND's host API) is refused under capture, so the host refuses it too (the routed ones:
  ``test_routes_random_host.py``);
* ``part[0] = x.sum()`` into an array made inside the function is a device-to-device copy in CuPy,
  captured there: the host must not refuse it.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST = dict(backend="host", capture_sizes=[4, 8])


def data(seed, rows=3):
    return np.random.default_rng(seed).standard_normal((rows, 4))


ESCAPES = {
    "asarray_then_float": (lambda x: x * float(np.asarray(x.sum())), "device_to_host_read", "float()"),
    "float64": (lambda x: x * np.float64(x.sum()), "device_to_host_read", "float()"),
    "legacy_gamma": (lambda x: x + np.random.gamma(2.0, size=x.shape), "library_call", "np.random.gamma"),
    "legacy_poisson": (lambda x: x + np.random.poisson(size=x.shape), "library_call", "np.random.poisson"),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_an_escape_falls_back_and_raises_under_raise(name):
    fn, code, words = ESCAPES[name]
    f = cg.jit(fn, config=dict(HOST, num_warmups=0))  # a warm-up would draw once more before the refusal
    state = np.random.get_state()
    for seed in (1, 2):
        np.random.set_state(state)
        want = fn(data(seed))
        np.random.set_state(state)
        np.testing.assert_array_equal(f(data(seed)), want)  # eager: the same as calling it
    np.random.set_state(state)
    assert f.stats().fallbacks_by_reason == {code: 2} and f.registry.num_graphs() == 0
    assert words in f.stats().detail(code)
    strict = cg.jit(fn, config=dict(HOST, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match=words.replace("(", r"\(").replace(")", r"\)")):
        strict(data(3))
    np.random.set_state(state)


DEVICE_OPS = {
    "asarray_values": lambda x: x + np.asarray(x)[0, 0],
    "array": lambda x: x * np.array(x.max()),
    "ascontiguousarray": lambda x: np.ascontiguousarray(x) * 2,
}


@pytest.mark.parametrize("name", sorted(DEVICE_OPS))
def test_array_creators_on_captured_arrays_stay_on_the_device(name):
    fn = DEVICE_OPS[name]  # cupy.asarray / cupy.array of a device array: device work, captured
    f = cg.jit(fn, config=HOST)
    for seed in (1, 2, 3):
        np.testing.assert_array_equal(f(data(seed)), fn(data(seed)))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks_by_reason == {}


def test_numpy_is_as_it_was_after_a_capture_and_outside_one():
    asarray, rand = np.asarray, np.random.rand
    f = cg.jit(lambda x: x + np.random.rand(), config=HOST)
    f(data(4))
    assert (np.asarray, np.random.rand) == (asarray, rand)
    x = np.arange(3.0)
    assert type(np.asarray(x)) is np.ndarray  # outside a capture nothing is refused


def test_closure_arrays_are_allowed_during_capture():
    table = np.linspace(0.0, 1.0, 4)

    def fn(x):
        return x * table + np.sin(table)

    f = cg.jit(fn, config=HOST)
    with pytest.warns(cg.ForeignMemoryWarning, match="table"):
        for seed in (5, 6):
            np.testing.assert_array_equal(f(data(seed)), fn(data(seed)))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks_by_reason == {}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_a_reduction_stored_into_an_element_is_captured(dtype):
    def fn(x):
        part = np.zeros(3, dtype=dtype)
        part[0] = x.sum()
        part[2] = x[0, 1]
        return x * 2, part

    f = cg.jit(fn, config=HOST)
    for seed in (7, 8, 9):
        got, want = f(data(seed, rows=4)), fn(data(seed, rows=4))  # no padding rows: the same sum
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks_by_reason == {}


def test_a_python_value_of_the_data_is_still_refused_next_to_a_stored_one():
    def fn(x):
        part = np.zeros(2)
        part[0] = x.sum()  # a device copy
        return part * float(x.max())  # a host read

    f = cg.jit(fn, config=HOST)
    np.testing.assert_array_equal(f(data(10)), fn(data(10)))
    assert f.stats().fallbacks_by_reason == {"device_to_host_read": 1}
    assert "float() of an array" in f.stats().detail("device_to_host_read")


def test_a_scipy_sparse_product_is_refused_and_spmm_captures():
    sparse = pytest.importorskip("scipy.sparse")
    a = sparse.random(5, 4, density=0.5, format="csr", random_state=1)

    def product(x):
        return (a @ x.T).T  # the GPU's cupyx.scipy.sparse product runs cuSPARSE: refused under capture

    def replacement(x):
        return cg.linalg.spmm(a, x.T).T

    unrouted = dict(HOST, route_library_calls=False)  # (issue 29 routes the CSR product: docs/ROUTING.md)
    f, g = cg.jit(product, config=unrouted), cg.jit(replacement, config=HOST)
    with pytest.warns(cg.ForeignMemoryWarning, match="closure variable 'a'"):  # the graph reads a's arrays
        for seed in (1, 2, 3):
            np.testing.assert_array_equal(f(data(seed)), product(data(seed)))
            np.testing.assert_allclose(g(data(seed)), product(data(seed)))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"library_call": 3}
    assert "cupygraph.linalg.spmm" in f.stats().detail("library_call")
    assert g.registry.num_graphs() == 1 and g.stats().fallbacks == 0
    assert (a @ np.ones((4, 2))).shape == (5, 2)  # outside a capture nothing is refused


def test_a_scipy_dense_solver_is_refused_as_its_cupyx_counterpart_is():
    linalg = pytest.importorskip("scipy.linalg")

    def solved(x):
        return linalg.solve(np.eye(4) * 2.0, x.T).T  # cupyx.scipy.linalg.solve runs cuSOLVER: refused

    f = cg.jit(solved, config=HOST)
    for seed in (1, 2):
        np.testing.assert_array_equal(f(data(seed)), solved(data(seed)))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"library_call": 2}
    assert "scipy.linalg.solve" in f.stats().detail("library_call")
    assert linalg.solve(np.eye(2), np.ones(2)).shape == (2,)  # outside a capture nothing is refused
