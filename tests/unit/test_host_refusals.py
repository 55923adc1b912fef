"""The host backend refuses what CuPy refuses under capture, so it never returns a stale value.

A host replay re-executes the function; a GPU replay does not, so a Python value read from the
data (``float(x.sum())``) would be frozen into the graph. The host backend must fall back (or
raise) exactly where the GPU would: reads of array data to the host, data-dependent shapes and
library calls (cuBLAS, cuSOLVER). Shapes and static arguments stay usable.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST = dict(backend="host", max_capture_size=16)
UNROUTED = dict(HOST, route_library_calls=False)  # products refused as CuPy refuses cuBLAS (issue 29 routes them)


def batches(*rows_and_seeds):
    return [np.random.default_rng(seed).standard_normal((rows, 3)) for rows, seed in rows_and_seeds]


# -- the examples -------------------------------------------------------------------------------


def test_a_float_read_from_the_data_falls_back_instead_of_going_stale():
    f = cg.jit(lambda x: float(x.sum()), config=HOST)
    inputs = [np.full((3, 1), v) for v in (2.0, 4.0, 6.0)]
    assert [f(x) for x in inputs] == [6.0, 12.0, 18.0]
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"device_to_host_read": 3} and stats.capture_failures == 1
    assert f.registry.num_graphs() == 0
    detail = stats.detail("device_to_host_read")
    assert "float() of an array" in detail
    assert "(at test_host_refusals.py:" in detail and "lambda x: float(x.sum())" in detail


def test_a_python_int_from_the_data_inside_a_returned_list_falls_back():
    def fn(x):
        return [x * 2, int(np.argmax(x[:, 0]))]

    f = cg.jit(fn, config=HOST)
    for x in batches((3, 0), (3, 1), (3, 2), (3, 3)):
        got, want = f(x), fn(x)
        assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    assert f.stats().fallbacks_by_reason == {"device_to_host_read": 4}
    assert "int() of an array" in f.stats().detail("device_to_host_read")


# -- every refused op: fallback with its code, the same results as eager, or CaptureError under raise ------


REFUSED = {
    "float": (lambda x: x * float(x.max()), "device_to_host_read", "float()"),
    "int": (lambda x: x * int(x[0, 0] > 0), "device_to_host_read", "int()"),
    "if": (lambda x: x + 1 if x.sum() > 0 else x - 1, "device_to_host_read", "bool()"),
    "and": (lambda x: x * ((x > 0).any() and 2), "device_to_host_read", "bool()"),
    "index": (lambda x: x[: np.argmax(x[:, 0])], "device_to_host_read", "Python integer"),
    "range": (lambda x: x * len(range(x.shape[0] * (x[0, 0] > 0))), "device_to_host_read", "Python integer"),
    "item": (lambda x: x / x.max().item(), "device_to_host_read", ".item()"),
    "tolist": (lambda x: x * max(x[:, 0].tolist()), "device_to_host_read", ".tolist()"),
    "iterate": (lambda x: x * sum(float(v) for v in x[0]), "device_to_host_read", "float()"),
    "print": (lambda x: print(x.sum()) or x, "device_to_host_read", "print()"),
    "format": (lambda x: x * len(f"{x.max():.3f}"), "device_to_host_read", "format"),
    "mask": (lambda x: x[x > 0], "data_dependent_shape", "boolean-mask indexing"),
    "mask_assign": (lambda x: np.copyto(x, 0, where=x > 5) or x.__setitem__(x < -5, 0) or x,
                    "data_dependent_shape", "boolean-mask assignment"),
    "nonzero": (lambda x: np.nonzero(x > 0)[0], "data_dependent_shape", "np.nonzero"),
    "where1": (lambda x: np.where(x > 0)[1], "data_dependent_shape", "np.where with one argument"),
    "unique": (lambda x: np.unique(np.round(x)), "data_dependent_shape", "np.unique"),
    "bincount": (lambda x: np.bincount(np.abs(x * 3).astype(np.int64).ravel()), "data_dependent_shape",
                 "np.bincount"),
    "flatnonzero": (lambda x: np.flatnonzero(x > 0), "data_dependent_shape", "np.flatnonzero"),
    "matmul_op": (lambda x: x @ x.T, "library_call", "cuBLAS"),
    "matmul": (lambda x: np.matmul(x, x.T), "library_call", "cuBLAS"),
    "dot": (lambda x: np.dot(x, x.T), "library_call", "np.dot"),
    "dot_method": (lambda x: x.dot(x.T), "library_call", ".dot()"),
    "tensordot": (lambda x: np.tensordot(x, x, axes=([1], [1])), "library_call", "np.tensordot"),
    "einsum": (lambda x: np.einsum("ij,kj->ik", x, x), "library_call", "np.einsum"),
    "inner": (lambda x: np.inner(x, x), "library_call", "np.inner"),
    "vdot": (lambda x: np.vdot(x, x) * x, "library_call", "np.vdot"),
    "norm": (lambda x: x / np.linalg.norm(x, 2), "library_call", "np.linalg.norm"),  # (the SVD's; others capture)
    "list_index": (lambda x: x[:, [2, 1, 0]], "host_upload", "indexing with a Python list"),
    "list_assign": (lambda x: x.__setitem__((slice(None), [0, 2]), 0.0) or x, "host_upload",
                    "assignment with a Python list"),
    "solve": (lambda x: np.linalg.solve(np.eye(3) + 0 * x[:3], x.T).T, "library_call", "np.linalg.solve"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_op_falls_back_with_its_code_and_matches_eager(name):
    fn, code, words = REFUSED[name]
    f = cg.jit(fn, config=UNROUTED)
    for x in batches((4, 1), (4, 2), (3, 3)):
        with np.errstate(all="ignore"):
            got, want = f(x.copy()), fn(x.copy())
        assert np.array_equal(got, want), name
    stats = f.stats()
    assert set(stats.fallbacks_by_reason) == {code} and stats.fallbacks == 3, stats.to_dict()
    assert stats.capture_failures == 1 and f.registry.num_graphs() == 0
    assert words in stats.detail(code) and "(at test_host_refusals.py:" in stats.detail(code)


@pytest.mark.parametrize("name", ["float", "mask", "matmul_op", "norm"])
def test_refused_op_raises_under_raise_naming_op_and_line(name):
    fn, _, words = REFUSED[name]
    f = cg.jit(fn, config=dict(UNROUTED, on_capture_error="raise"))
    for _ in range(2):  # every call of the key, without capturing again
        with pytest.raises(cg.CaptureError, match=r"test_host_refusals\.py") as info:
            f(batches((4, 1))[0])
        assert words in str(info.value)
    assert f.stats().capture_failures == 1


def test_a_refusal_the_function_swallows_still_fails_the_capture():
    def fn(x):
        try:
            scale = float(x.max())  # refused; an invalidated CUDA capture fails at its end anyway
        except Exception:
            scale = 2.0
        return x * scale

    f = cg.jit(fn, config=HOST)
    x = batches((3, 5))[0]
    assert np.array_equal(f(x), x * float(x.max()))
    assert f.stats().fallbacks_by_reason == {"device_to_host_read": 1}


# -- what stays allowed -----------------------------------------------------------------------------------


ALLOWED = {
    "shapes": lambda x: x * x.shape[1] + len(x[0]) + x.ndim + x.size // x.shape[0],
    "where3": lambda x: np.where(x > 0, x, 0.5 * x),
    "reductions": lambda x: (x - x.mean(axis=0)) / (x.std() + 1) + x.max() - x.min() + x.argmax(),
    "scalar_output": lambda x: x.sum(),
    "fancy_index": lambda x: x[np.arange(3) // 2] + x[:, np.arange(2, -1, -1)][0],
    "astype_cumsum_sort": lambda x: np.sort(np.cumsum(x.astype(np.float32), axis=1), axis=1),
    "iterate_arrays": lambda x: sum(row for row in x[:2]),
    "concatenate": lambda x: np.concatenate([x, -x], axis=1)[:, ::2],
    "count_nonzero": lambda x: x * np.count_nonzero(x > 0, axis=1)[:, None],
    "static_python": lambda x: x * 2.5 + np.float32(1) + (3 if x.dtype == np.float64 else 4),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_shape_and_array_only_work_is_captured_and_replays(name):
    fn = ALLOWED[name]
    f = cg.jit(fn, config=dict(backend="host", capture_sizes=[4]))
    for x in batches((4, 1), (4, 2), (4, 3)):
        got, want = f(x), fn(x)
        assert type(got) is type(want)  # plain arrays reach the caller; a NumPy scalar where fn gives one
        assert np.allclose(got, want, rtol=1e-12), name
    assert f.stats().fallbacks == 0 and f.stats().hits == 2, f.stats().to_dict()


def test_outputs_are_plain_ndarrays_in_every_mode():
    for mode in ("copy", "view"):
        f = cg.jit(lambda x: {"y": x * 2, "s": x.sum(), "views": [x[:, 0], x.T]}, config=dict(HOST, output_mode=mode))
        x = batches((4, 0))[0]  # a capture size: x.T carries the batch on axis 1, which a padded call cannot cut
        f(x)  # the call that captures returns the plain call's result; replays:
        out = f(x)
        leaves = [out["y"], *out["views"]]
        assert all(type(leaf) is np.ndarray for leaf in leaves), [type(leaf) for leaf in leaves]
        assert type(out["s"]) is np.float64  # a reduction: the NumPy scalar the plain function returns


# -- graph breaks: eager steps in PIECEWISE, captured (and refused) in FULL ----------------------------------


def test_graph_break_ops_run_on_plain_arrays_in_piecewise_mode():
    seen = []

    @cg.graph_break
    def host_step(y):
        seen.append(type(y))
        return y / float(np.abs(y).max())  # a host read: fine in an eager step

    fn = lambda x: host_step(x * 2) + 1
    piecewise = cg.jit(fn, config=dict(HOST, mode="PIECEWISE"))
    for x in batches((3, 1), (3, 2), (3, 3)):
        assert np.array_equal(piecewise(x), fn(x))
    assert piecewise.stats().fallbacks == 0 and piecewise.stats().replays_by_mode == {"PIECEWISE": 2}
    assert set(seen) == {np.ndarray}
    full = cg.jit(fn, config=dict(HOST, mode="FULL"))
    x = batches((3, 3))[0]
    assert np.array_equal(full(x), fn(x))
    assert full.stats().fallbacks_by_reason == {"device_to_host_read": 1}


def test_a_graph_break_returning_a_host_value_cannot_be_captured():
    host_max = cg.graph_break(lambda y: float(y.max()))
    fn = lambda x: x * host_max(x)
    f = cg.jit(fn, config=dict(HOST, mode="PIECEWISE"))
    for x in batches((3, 1), (3, 2)):
        assert np.array_equal(f(x), fn(x))
    assert f.stats().fallbacks == 2 and "host value" in f.stats().detail("capture_failed")


def test_the_guard_is_off_outside_the_capture_run():
    calls = []

    def fn(x):
        calls.append(type(x))
        return x * 2

    f = cg.jit(fn, config=dict(HOST, num_warmups=1))
    x = batches((3, 1))[0]
    f(x)
    f(x)
    # The call itself and its warm-up on plain arrays, the capture run guarded, then a replay on plain arrays.
    assert calls[:2] == [np.ndarray, np.ndarray] and calls[2] is not np.ndarray
    assert calls[3:] == [np.ndarray]
