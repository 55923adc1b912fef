"""Host data uploaded inside a recorded function: refused by name, or baked in as a constant (issue 20).

The host backend mirrors the GPU's ``cupy.asarray(numpy_data)``: the user's ``np.asarray`` /
``np.array`` of host data during a capture is an upload, ruled by ``host_uploads``.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from numpy import asarray as asarray_by_name  # a creator the module binds by name

import cupygraph as cg
from cupygraph.backends.guards.uploads import UploadLedger
from cupygraph.diagnostics.inspect import describe
from cupygraph.errors import CaptureError

WEIGHTS = [0.5, -1.25, 2.0]


def host(**overrides):
    return dict(backend="host", max_capture_size=8, **overrides)


def scaled(x):
    w = np.asarray(WEIGHTS)  # upload-line
    return x * w


def data(seed, rows=4):
    return np.random.default_rng(seed).standard_normal((rows, 3))


def test_fallback_refuses_an_upload_naming_the_call_size_and_line():
    f = cg.jit(scaled, config=host(host_uploads="fallback"))
    for seed in range(3):
        x = data(seed)
        np.testing.assert_array_equal(f(x), scaled(x))
    stats = f.stats()
    assert f.registry.num_graphs() == 0 and stats.fallbacks_by_reason == {"host_upload": 3}
    detail = stats.detail("host_upload")
    assert "numpy.asarray of <f8[3] (24 bytes)" in detail
    assert "(at test_host_uploads.py:" in detail and "# upload-line" in detail
    assert 'host_uploads is "fallback"' in detail and 'host_uploads="auto", the default' in detail


def test_fallback_raises_capture_error_under_on_capture_error_raise():
    f = cg.jit(scaled, config=host(host_uploads="fallback", on_capture_error="raise"))
    with pytest.raises(CaptureError, match=r"host-to-device upload during capture: numpy\.asarray"):
        f(data(0))


@pytest.mark.parametrize("mode", ["constant", "auto"])
def test_a_constant_upload_is_baked_and_replays_match_eager(mode, caplog):
    f = cg.jit(scaled, config=host(host_uploads=mode))
    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        for seed in range(4):
            x = data(seed)
            np.testing.assert_array_equal(f(x), scaled(x))
    stats = f.stats()
    assert f.registry.num_graphs() == 1 and stats.fallbacks == 0 and stats.replays == 3  # the first captured
    ((call, nbytes),) = stats.baked_uploads.items()
    assert nbytes == 24 and call.startswith("numpy.asarray of <f8[3]") and "# upload-line" in call
    assert any("baked into the graph as a constant" in r.getMessage() and "24 bytes" in r.getMessage()
               for r in caplog.records)


def test_constant_freezes_the_values_at_capture_like_a_graph_would():
    f = cg.jit(scaled, config=host(host_uploads="constant"))
    x = data(5)
    first = f(x)
    WEIGHTS[0] = 100.0  # host data changed after the capture
    try:
        np.testing.assert_array_equal(f(x), first)  # the graph still uploads the capture's bytes
        assert not np.array_equal(scaled(x), first)
    finally:
        WEIGHTS[0] = 0.5


def test_auto_falls_back_when_the_bytes_change_between_warm_up_and_capture():
    calls = []

    def counting(x):
        calls.append(1)
        return x + np.asarray([float(len(calls))])  # changes every run

    f = cg.jit(counting, config=host(host_uploads="auto"))
    x = data(1)
    f(x)
    stats = f.stats()
    assert stats.fallbacks_by_reason == {"host_upload": 1} and f.registry.num_graphs() == 0
    assert "bytes differed" in stats.detail("host_upload")


def test_auto_needs_a_warm_up_to_compare():
    f = cg.jit(scaled, config=host(host_uploads="auto", num_warmups=0))
    x = data(2)
    np.testing.assert_array_equal(f(x), scaled(x))
    assert f.stats().fallbacks_by_reason == {"host_upload": 1}
    assert "num_warmups >= 1" in f.stats().detail("host_upload")


def test_the_functions_own_arrays_and_scalars_are_not_uploads():
    def fn(x):
        y = np.asarray(x) * 2  # an argument: no upload
        return np.asarray(y + np.array(3.0))  # a derived array and a 0-d scalar: no upload

    f = cg.jit(fn, config=host())
    for seed in range(3):
        x = data(seed)
        np.testing.assert_array_equal(f(x), fn(x))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0 and f.stats().baked_uploads == {}


def test_numpy_is_restored_after_every_capture():
    originals = {name: getattr(np, name) for name in ("asarray", "array", "asanyarray", "ascontiguousarray")}
    f = cg.jit(scaled, config=host(host_uploads="constant"))
    f(data(0))
    g = cg.jit(scaled, config=host())
    g(data(0))
    assert {name: getattr(np, name) for name in originals} == originals


def test_the_ledger_matches_uploads_per_place_and_run():
    ledger = UploadLedger("auto", num_warmups=2)
    blob = np.arange(3.0)
    for _ in range(2):
        ledger.warmup_upload("numpy.asarray", " (at a.py:1)", (3,), "<f8", blob, slot="slot-a")
        ledger.warmup_upload("numpy.asarray", " (at a.py:2)", (3,), "<f8", blob + 1, slot="slot-b")
    assert ledger.capture_upload("numpy.asarray", " (at a.py:2)", (3,), "<f8", 24, blob + 1) == "slot-b"
    assert ledger.capture_upload("numpy.asarray", " (at a.py:1)", (3,), "<f8", 24, blob) == "slot-a"
    with pytest.raises(CaptureError, match="fewer uploads here"):
        ledger.capture_upload("numpy.asarray", " (at a.py:1)", (3,), "<f8", 24, blob)
    assert [b.where for b in ledger.baked] == [" (at a.py:2)", " (at a.py:1)"]


class _Base:
    def method(self):
        return "original"


class _Child(_Base):
    pass


def test_interception_is_per_thread_and_restores_inherited_attributes():
    import threading

    from cupygraph.backends.guards.uploads import Interception

    interception = Interception(lambda: [(_Child, "method", "child.method")])
    seen = []

    def handler(label, original, args, kwargs):
        seen.append(label)
        return "intercepted"

    other = []
    with interception.active(handler):
        assert _Child().method() == "intercepted" and "method" in vars(_Child)
        thread = threading.Thread(target=lambda: other.append(_Child().method()))
        thread.start()
        thread.join()
    assert other == ["original"] and seen == ["child.method"]
    assert "method" not in vars(_Child) and _Child().method() == "original"  # inherited again, not copied


def test_numpys_own_creator_calls_are_untouched_during_a_capture():
    def fn(x):
        # np.median and np.pad call NumPy's creators internally (cupy.median captures as written);
        # np.percentile would upload its q, as cupy.percentile does.
        return x * np.median(np.abs(x)) + np.pad(x, ((0, 0), (1, 1)))[:, 1:-1]

    f = cg.jit(fn, config=host())
    for seed in range(3):
        x = data(seed)
        np.testing.assert_array_equal(f(x), fn(x))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0 and f.stats().baked_uploads == {}


def test_a_refused_upload_the_function_catches_still_fails_the_capture():
    def forgiving(x):
        try:
            w = np.asarray(WEIGHTS)
        except Exception:  # a library taking another path than in the warm-up
            w = np.zeros(3)
        return x * w

    f = cg.jit(forgiving, config=host(host_uploads="fallback"))
    for seed in range(2):
        x = data(seed)
        np.testing.assert_array_equal(f(x), forgiving(x))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"host_upload": 2}


def test_describe_lists_the_baked_uploads():
    f = cg.jit(scaled, config=host(host_uploads="constant"))
    f(data(0))
    text = describe(f)
    assert "host uploads baked into graphs as constants:" in text and "24 bytes  numpy.asarray of <f8[3]" in text


# -- percentile/quantile: CuPy uploads ``q`` (cupy.asarray(q)), a scalar too -------------------------


def p10_90(x):
    return np.percentile(x, [10, 90], axis=1)  # q-line


def test_percentile_uploads_its_q_and_fallback_refuses_it_naming_the_line():
    f = cg.jit(p10_90, config=host(host_uploads="fallback"))
    for seed in range(3):
        np.testing.assert_array_equal(f(data(seed)), p10_90(data(seed)))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"host_upload": 3}
    detail = f.stats().detail("host_upload")
    assert "numpy.percentile of <f8[2] (16 bytes)" in detail and "# q-line" in detail


def test_a_scalar_q_is_no_upload_as_cupy_fills_it_on_the_device():
    def p90(x):
        return np.percentile(x, 90, axis=1) + np.quantile(x, np.float32(0.5), axis=1)

    f = cg.jit(p90, config=host(host_uploads="fallback"))
    for seed in range(3):
        np.testing.assert_array_equal(f(data(seed)), p90(data(seed)))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0 and f.stats().baked_uploads == {}


@pytest.mark.parametrize("mode", ["auto", "constant"])
def test_percentile_and_quantile_bake_q_and_match_eager(mode):
    def both(x):
        return np.percentile(x, 90, axis=1) + np.quantile(x, [0.25, 0.75], axis=1).sum(axis=0)

    f = cg.jit(both, config=host(host_uploads=mode))
    for seed in range(4):
        np.testing.assert_array_equal(f(data(seed)), both(data(seed)))
    stats = f.stats()
    assert f.registry.num_graphs() == 1 and stats.fallbacks == 0 and stats.replays == 3  # the first captured
    assert list(stats.baked_uploads.values()) == [16]  # the list q; the scalar one is filled on the device


def test_constant_freezes_q_at_capture_like_a_graph_would():
    qs = [10.0, 50.0]

    def fn(x):
        return np.percentile(x, qs, axis=1)

    f = cg.jit(fn, config=host(host_uploads="constant"))
    x = data(7)
    first = f(x)
    qs[0] = 95.0  # host data changed after the capture
    np.testing.assert_array_equal(f(x), first)  # the graph still uses the capture's q
    assert not np.array_equal(fn(x), first)


def test_a_generator_made_inside_the_function_is_no_upload():
    def noisy(x):
        # NumPy's C code turns the seed into an array from this frame; cupy.random.default_rng keeps
        # its state on the device and captures, so the reference must not call it an upload.
        return x + np.random.default_rng(7).standard_normal(3)

    f = cg.jit(noisy, config=host())
    for seed in range(3):
        np.testing.assert_array_equal(f(data(seed)), noisy(data(seed)))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0 and f.stats().baked_uploads == {}
    assert np.random.default_rng(7).standard_normal(3).shape == (3,)  # restored after the capture


def scaled_by_name(x):
    w = asarray_by_name(WEIGHTS)  # upload-by-name
    return x * w


def test_a_creator_imported_by_name_is_an_upload_too():
    # ``from numpy import asarray`` binds the function in the user's module, out of reach of the
    # patched numpy module: the capture patches the function's own globals as well (and puts the
    # original back), so the host refuses or bakes it as it does np.asarray, and as the GPU does.
    f = cg.jit(scaled_by_name, config=host(host_uploads="fallback"))
    for seed in range(2):
        x = data(seed)
        np.testing.assert_array_equal(f(x), scaled_by_name(x))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"host_upload": 2}
    assert "# upload-by-name" in f.stats().detail("host_upload")
    assert globals()["asarray_by_name"] is np.asarray
    g = cg.jit(scaled_by_name, config=host(host_uploads="constant"))
    for seed in range(3):
        x = data(seed)
        np.testing.assert_array_equal(g(x), scaled_by_name(x))
    assert g.registry.num_graphs() == 1 and g.stats().fallbacks == 0
    ((call, nbytes),) = g.stats().baked_uploads.items()
    assert nbytes == 24 and "# upload-by-name" in call
    assert globals()["asarray_by_name"] is np.asarray


def test_assigning_a_python_list_is_an_upload():
    def fill_head(x):
        y = x * 2
        y[0] = [1.0, 2.0, 3.0]  # list-assign
        return y

    f = cg.jit(fill_head, config=host())
    x = data(0)
    np.testing.assert_array_equal(f(x), fill_head(x))
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks_by_reason == {"host_upload": 1}
