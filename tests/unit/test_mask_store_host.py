"""``y[mask] = v`` captured unchanged on the host reference (issue 29), as the GPU routes it.

CuPy's boolean-mask store reads the mask's count to the host, which a capture refuses; the store of
one value runs as ``copyto(y, v, where=mask)`` instead (``routes/cupy_mask_store.py`` on the GPU,
``backends/guards/host_guard.py`` here), noted as ``mask store (at file:line)``. With routing off it
is refused as before, and so are other stores and every other device-to-host read.
``tests/gpu/test_mask_store_gpu.py`` checks the same on the GPU against eager CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.backends.mask_stores import mask_store_where, stored_scalar

HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8]}


def clip_negative(x):
    y = x * 2
    y[y < 0] = 0  # store-line
    return y


def rows_by_first_column(x):
    y = x + 1
    y[y[:, 0] > 1] = -1.5  # store-line: a mask of the leading axis, over whole rows
    return y


def leading_two_axes(x):
    y = np.stack([x, -x], axis=1)  # (rows, 2, 3)
    y[y[..., 0] > 0] = 7  # store-line: a (rows, 2) mask over the last axis
    return y


def zero_d_of_the_data(x):
    y = x.copy()
    y[y > 0.5] = y.mean()  # store-line: a 0-d array of the capture's data
    return y


def numpy_values(x):
    y = x * 3
    y[y > 1] = np.float32(2.5)  # store-line
    y[y < -1] = np.array(-4)  # store-line: a 0-d NumPy array
    return y


def into_ints(x):
    y = (x * 10).astype(np.int64)
    y[y > 3] = 2.7  # store-line: truncated, as NumPy casts it
    return y


def into_uint8(x):
    y = (np.abs(x) * 10).astype(np.uint8)
    y[y > 5] = np.array(-1)  # store-line: a 0-d array cast unsafely, 255
    return y


def into_int8(x):
    y = (x * 10).astype(np.int8)
    y[y > 5] = np.int64(300)  # store-line: 44, as NumPy casts a NumPy integer
    return y


def into_bools(x):
    y = x > 0
    y[x < -0.5] = 2.5  # store-line: True
    return y


def into_complex(x):
    y = x * (1 + 1j)
    y[y.real > 0] = 2 - 3j  # store-line
    return y


def all_false(x):
    y = x.copy()
    y[y > 1e9] = 5.0  # store-line: selects nothing
    return y


def all_true(x):
    y = x.copy()
    y[y == y] = 5.0  # store-line: selects everything
    return y


COLUMNS = np.array([True, False, True])  # an array the function reads by address: a device array on the GPU


def global_mask(x):
    y = (x * 2).T  # (3, rows)
    y[COLUMNS] = -2.0  # store-line
    return y


STORES = [clip_negative, rows_by_first_column, leading_two_axes, zero_d_of_the_data, numpy_values, into_ints,
          into_uint8, into_int8, into_bools, into_complex, all_false, all_true]


def batches(*rows):
    return [np.random.default_rng(seed).standard_normal((n, 3)) for seed, n in enumerate(rows)]


@pytest.mark.parametrize("fn", STORES, ids=lambda fn: fn.__name__)
def test_a_mask_store_of_one_value_captures_and_replays_as_the_plain_function(fn):
    graphed = cg.jit(fn, config=HOST)
    for x in batches(8, 4, 8, 4, 8):
        got, want = graphed(x), fn(x)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.replays == 3 and graphed.registry.num_graphs() == 2
    assert stats.routed_calls and all(call.startswith("mask store (at test_mask_store_host.py:") and
                                      "# store-line" in call for call in stats.routed_calls), stats.routed_calls
    assert set(stats.routed_calls.values()) == {2}  # each graph routed each store


def test_a_mask_the_function_reads_by_address_is_routed_too():
    # On the GPU a global mask is a device array, which the route takes as any other.
    graphed = cg.jit(global_mask, config=HOST)
    with pytest.warns(cg.ForeignMemoryWarning, match="COLUMNS"):
        for x in batches(8, 8, 8):
            np.testing.assert_array_equal(graphed(x), global_mask(x))
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.replays == 2
    ((call, graphs),) = stats.routed_calls.items()
    assert graphs == 1 and call.startswith("mask store (at test_mask_store_host.py:") and "# store-line" in call


def clamp_in_place(x):
    x[x < 0] = 0  # store-line: into the argument
    return x * 2


def test_a_store_into_the_argument_is_written_back_as_eagerly():
    graphed = cg.jit(clamp_in_place, config=HOST)
    for x in batches(8, 4, 8, 4):
        mine, theirs = x.copy(), x.copy()
        np.testing.assert_array_equal(graphed(mine), clamp_in_place(theirs))
        np.testing.assert_array_equal(mine, theirs)  # the caller's array changed as the plain call changes it
        assert (x < 0).any() and not np.array_equal(mine, x)
    stats = graphed.stats()
    assert stats.fallbacks == 0 and stats.replays == 2 and len(stats.routed_calls) == 1


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_refuses_the_store_naming_the_line(switch, monkeypatch):
    config = dict(HOST)
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    graphed = cg.jit(clip_negative, config=config)
    for x in batches(8, 4):
        np.testing.assert_array_equal(graphed(x), clip_negative(x))
    stats = graphed.stats()
    assert stats.fallbacks_by_reason == {"data_dependent_shape": 2} and not stats.routed_calls
    detail = stats.detail("data_dependent_shape")
    assert "boolean-mask assignment" in detail and "# store-line" in detail and "copyto" in detail


def store_an_array(x):
    y = x * 2
    y[y[:, 0] > 0] = x[0]  # refused-line: an array of values, not one
    return y


def store_under_a_tuple_index(x):
    y = x * 2
    y[:, y[0] > 0] = 0  # refused-line: a mask inside a tuple index
    return y


def branch_on_data(x):
    if x.max() > 0:  # refused-line
        return x * 2
    return x


def bincount_without_bound(x):
    return np.bincount(np.abs(x * 3).astype(np.int64).ravel())  # refused-line


def masked_read(x):
    y = x * 2
    return y[y < 0]  # refused-line


@pytest.mark.parametrize(("fn", "code", "words"), [
    (store_an_array, "data_dependent_shape", "boolean-mask assignment"),
    (store_under_a_tuple_index, "data_dependent_shape", "boolean-mask assignment"),
    (branch_on_data, "device_to_host_read", "bool()"),
    (bincount_without_bound, "data_dependent_shape", "np.bincount"),
    (masked_read, "data_dependent_shape", "boolean-mask indexing"),
], ids=lambda v: getattr(v, "__name__", None))
def test_other_stores_and_host_reads_stay_refused_naming_the_line(fn, code, words):
    graphed = cg.jit(fn, config=HOST)
    for x in batches(8, 8):
        np.testing.assert_array_equal(graphed(x), fn(x))
    stats = graphed.stats()
    assert set(stats.fallbacks_by_reason) == {code} and graphed.registry.num_graphs() == 0
    assert not stats.routed_calls
    detail = stats.detail(code)
    assert words in detail and "(at test_mask_store_host.py:" in detail and "# refused-line" in detail


def test_a_value_numpy_will_not_store_raises_as_without_jit():
    def overflowing(x):
        y = (np.abs(x) * 10).astype(np.uint8)
        y[y > 5] = -1  # NumPy refuses a Python int out of uint8's range
        return y

    graphed = cg.jit(overflowing, config=HOST)
    with pytest.raises(OverflowError):
        graphed(batches(8)[0])
    assert graphed.registry.num_graphs() == 0


def test_the_rule_both_backends_apply():
    assert mask_store_where((4, 3), (4, 3)) == (4, 3)
    assert mask_store_where((4, 3), (4,)) == (4, 1)
    assert mask_store_where((2, 3, 5), (2, 3)) == (2, 3, 1)
    assert mask_store_where((4, 3), (3,)) is None  # a trailing axis: not a leading-axes mask
    assert mask_store_where((4, 3), ()) is None and mask_store_where((4,), (4, 1)) is None
    assert stored_scalar(2.7, np.int64) == 2 and stored_scalar(np.array(-1), np.uint8) == 255
    assert stored_scalar(True, np.float32).dtype == np.float32
    assert stored_scalar(-1, np.uint8) is None  # out of range: the library's own error
    assert stored_scalar(np.arange(2.0), np.float64) is None and stored_scalar("1", np.float64) is None
    assert stored_scalar(np.str_("1"), np.float64) is None and stored_scalar([1.0], np.float64) is None
