"""``y[mask] = v`` captured unchanged on the GPU (issue 29): ``routes/cupy_mask_store.py``.

The GPU twin of ``tests/unit/test_mask_store_host.py``. CuPy's boolean-mask store reads the mask's
count to the host, which a capturing stream refuses; while ``jit`` records, a store of one value runs
as ``cupy.copyto(y, v, where=mask)``. Every replay must equal eager CuPy bit for bit on fresh random
data (outputs poisoned before each replay), the store be noted as routed with the user's line, and
everything else (routing off, other stores, other device-to-host reads) still fall back naming it.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.pytree import flatten  # noqa: E402

CONFIG = {"backend": "cupy", "mode": "FULL", "capture_sizes": [4, 8]}


def clip_negative(x):
    y = x * 2
    y[y < 0] = 0  # store-line
    return y


def rows_by_first_column(x):
    y = x + 1
    y[y[:, 0] > 1] = -1.5  # store-line
    return y


def leading_two_axes(x):
    y = cupy.stack([x, -x], axis=1)
    y[y[..., 0] > 0] = 7  # store-line
    return y


def zero_d_of_the_data(x):
    y = x.copy()
    y[y > 0.5] = y.mean()  # store-line: a 0-d device array
    return y


def numpy_values(x):
    y = x * 3
    y[y > 1] = np.float32(2.5)  # store-line
    y[y < -1] = np.array(-4)  # store-line
    return y


def into_ints(x):
    y = (x * 10).astype(cupy.int64)
    y[y > 3] = 2.7  # store-line
    return y


def into_uint8(x):
    y = (cupy.abs(x) * 10).astype(cupy.uint8)
    y[y > 5] = np.array(-1)  # store-line
    return y


def into_int8(x):
    y = (x * 10).astype(cupy.int8)
    y[y > 5] = np.int64(300)  # store-line
    return y


def into_bools(x):
    y = x > 0
    y[x < -0.5] = 2.5  # store-line
    return y


def into_complex(x):
    y = x * (1 + 1j)
    y[y.real > 0] = 2 - 3j  # store-line
    return y


def into_half(x):
    y = x.astype(cupy.float16)
    y[y > 0] = 0.1  # store-line
    return y


def all_false(x):
    y = x.copy()
    y[y > 1e9] = 5.0  # store-line
    return y


def all_true(x):
    y = x.copy()
    y[y == y] = 5.0  # store-line
    return y


STORES = [clip_negative, rows_by_first_column, leading_two_axes, zero_d_of_the_data, numpy_values, into_ints,
          into_uint8, into_int8, into_bools, into_complex, into_half, all_false, all_true]


def fresh(seed, rows):
    return cupy.asarray(np.random.default_rng(seed).standard_normal((rows, 3)).astype(np.float32))


def poison(graphed):
    for entry in graphed.registry.entries():
        for leaf in flatten(entry.cudagraph.outputs, lambda v: isinstance(v, cupy.ndarray))[0]:
            kind = leaf.dtype.kind
            leaf.fill(np.nan if kind in "fc" else True if kind == "b" else np.iinfo(leaf.dtype).max)


def check_replays_as_eager(fn, rows=(8, 4, 8, 4, 8)):
    graphed = cg.jit(fn, config=CONFIG)
    for seed, n in enumerate(rows):
        x = fresh(seed, n)
        want = cupy.asnumpy(fn(x))
        if seed:
            poison(graphed)
        got = graphed(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(cupy.asnumpy(got), want), (fn.__name__, seed)
    return graphed


@pytest.mark.parametrize("fn", STORES, ids=lambda fn: fn.__name__)
def test_a_mask_store_of_one_value_captures_and_replays_as_eager_cupy(fn):
    with cupy.cuda.Device(0):
        graphed = check_replays_as_eager(fn)
        stats = graphed.stats()
        assert stats.fallbacks == 0, stats.last_detail_by_reason
        assert stats.replays == 3 and graphed.registry.num_graphs() == 2
        assert stats.routed_calls and all(call.startswith("mask store (at test_mask_store_gpu.py:") and
                                          "# store-line" in call for call in stats.routed_calls), stats.routed_calls
        assert set(stats.routed_calls.values()) == {2}
    assert "__setitem__" not in vars(cupy.ndarray)  # CuPy's own again once no recording is open


COLUMNS = None


def global_mask(x):
    y = (x * 2).T
    y[COLUMNS] = -2.0  # store-line
    return y


def test_a_mask_the_function_reads_by_address_is_routed_too():
    global COLUMNS
    with cupy.cuda.Device(0):
        COLUMNS = cupy.asarray([True, False, True])
        try:
            with warnings.catch_warnings():  # the graph reads COLUMNS by address: warned, as meant here
                warnings.simplefilter("ignore", cg.ForeignMemoryWarning)
                graphed = check_replays_as_eager(global_mask, rows=(8, 8, 8))
            stats = graphed.stats()
            assert stats.fallbacks == 0 and stats.replays == 2 and len(stats.routed_calls) == 1, stats.to_dict()
        finally:
            COLUMNS = None


def clamp_in_place(x):
    x[x < 0] = 0  # store-line: into the argument
    return x * 2


def test_a_store_into_the_argument_is_written_back_as_eagerly():
    with cupy.cuda.Device(0):
        graphed = cg.jit(clamp_in_place, config=CONFIG)
        for seed, n in enumerate((8, 4, 8, 4)):
            x = fresh(seed, n)
            mine, theirs = x.copy(), x.copy()
            np.testing.assert_array_equal(cupy.asnumpy(graphed(mine)), cupy.asnumpy(clamp_in_place(theirs)))
            np.testing.assert_array_equal(cupy.asnumpy(mine), cupy.asnumpy(theirs))
            assert not np.array_equal(cupy.asnumpy(mine), cupy.asnumpy(x))
        stats = graphed.stats()
        assert stats.fallbacks == 0 and stats.replays == 2 and len(stats.routed_calls) == 1, stats.to_dict()


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_off_falls_back_naming_the_line(switch, monkeypatch):
    config = dict(CONFIG)
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    with cupy.cuda.Device(0):
        graphed = cg.jit(clip_negative, config=config)
        for seed, n in enumerate((8, 4)):
            x = fresh(seed, n)
            np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(clip_negative(x)))
        stats = graphed.stats()
        assert stats.fallbacks == 2 and graphed.registry.num_graphs() == 0 and not stats.routed_calls
        (reason,) = stats.fallbacks_by_reason
        assert "# store-line" in stats.detail(reason) and "copyto" in stats.detail(reason)


def store_an_array(x):
    y = x * 2
    y[y[:, 0] > 0] = x[0]  # refused-line
    return y


def store_under_a_tuple_index(x):
    y = x * 2
    y[:, y[0] > 0] = 0  # refused-line
    return y


def branch_on_data(x):
    if x.max() > 0:  # refused-line
        return x * 2
    return x


def bincount_without_bound(x):
    return cupy.bincount(cupy.abs(x * 3).astype(cupy.int64).ravel())  # refused-line


def masked_read(x):
    y = x * 2
    return y[y < 0]  # refused-line


@pytest.mark.parametrize("fn", [store_an_array, store_under_a_tuple_index, branch_on_data, bincount_without_bound,
                                masked_read], ids=lambda fn: fn.__name__)
def test_other_stores_and_host_reads_still_fall_back_naming_the_line(fn):
    with cupy.cuda.Device(0):
        graphed = cg.jit(fn, config=CONFIG)
        for seed in range(2):
            x = fresh(seed, 8)
            np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(fn(x)))
        stats = graphed.stats()
        assert graphed.registry.num_graphs() == 0 and stats.fallbacks == 2 and not stats.routed_calls
        (reason,) = stats.fallbacks_by_reason
        assert "test_mask_store_gpu.py:" in stats.detail(reason) and "# refused-line" in stats.detail(reason)


def test_other_threads_keep_cupys_own_mask_stores_while_a_capture_routes():
    rng = np.random.default_rng(9)
    base = cupy.asarray(rng.standard_normal((512, 64)).astype(np.float32))
    want = cupy.asnumpy(cupy.where(base < 0, cupy.float32(0), base))
    stop, errors = threading.Event(), []

    def eager_stores():
        try:
            while not stop.is_set():
                y = base.copy()
                y[y < 0] = 0
                if not np.array_equal(cupy.asnumpy(y), want):
                    errors.append("an eager mask store in another thread differed during a capture")
        except BaseException as err:  # reported below
            errors.append(repr(err))

    thread = threading.Thread(target=eager_stores)
    thread.start()
    try:
        for _ in range(4):
            check_replays_as_eager(clip_negative, rows=(8, 8))
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
