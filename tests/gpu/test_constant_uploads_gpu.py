"""Constant host data captured under the default config on the GPU (issue 29): ``host_uploads="auto"``.

The GPU twin of ``tests/unit/test_constant_uploads.py``: literals, ``cupy.asarray(np.linspace(...))``,
a list ``q`` for ``cupy.percentile`` and the weights cupyx.scipy.ndimage builds are baked into the
graph, and every replay equals eager CuPy bit for bit on fresh random data (the family pool's free
memory poisoned first); data that changes between the warm-up and the capture, and any upload of a
capture that runs no warm-up, are refused naming the user's line.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
ndi = pytest.importorskip("cupyx.scipy.ndimage")

CONFIG = {"backend": "cupy", "max_capture_size": 8}  # host_uploads left at its default


def fresh(seed, shape=(8, 3), dtype=np.float32):
    return cupy.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def literal_list(x):
    return x * cupy.asarray([0.5, -1.25, 2.0], dtype=cupy.float32)  # constant-line


def literal_ints(x):
    return x + cupy.array([[1, 2, 3]], dtype=cupy.int32)  # constant-line


def linspace_of_constants(x):
    return x * cupy.asarray(np.linspace(0.0, 1.0, 3))  # constant-line


def percentile_list(x):
    return cupy.percentile(x, [25, 75], axis=1)


def gaussian(x):
    return ndi.gaussian_filter(x, 1.5)


def convolve1d_literal(x):
    return ndi.convolve1d(x, cupy.asarray([0.25, 0.5, 0.25], dtype=cupy.float32), axis=-1)  # constant-line


CASES = {
    "literal_list": (literal_list, (8, 3), True),
    "literal_ints": (literal_ints, (8, 3), True),
    "linspace": (linspace_of_constants, (8, 3), True),
    "percentile_list": (percentile_list, (8, 16), False),  # uploaded inside CuPy: the line is CuPy's caller's
    "gaussian_filter": (gaussian, (8, 16, 16), False),
    "convolve1d": (convolve1d_literal, (8, 16, 16), True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_constant_host_data_is_captured_by_default_and_replays_as_eager_cupy(name):
    fn, shape, marked = CASES[name]
    with cupy.cuda.Device(0):
        f = cg.jit(fn, config=CONFIG)
        for seed in range(4):
            x = fresh(seed, shape)
            want = cupy.asnumpy(fn(x))
            if seed:
                f.backend.poison_free_memory(0x7F)
            got = f(x)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(cupy.asnumpy(got), want)
        stats = f.stats()
        assert f.registry.num_graphs() == 1 and stats.fallbacks == 0, stats.last_detail_by_reason
        assert stats.replays == 3 and stats.baked_uploads, stats.to_dict()
        assert all("test_constant_uploads_gpu.py:" in call for call in stats.baked_uploads), stats.baked_uploads
        if marked:
            assert any("# constant-line" in call for call in stats.baked_uploads), stats.baked_uploads


def test_a_scalar_q_is_no_upload():
    # CuPy fills a 0-d array on the device (core.array): nothing baked, as on the host reference.
    def p90(x):
        return cupy.percentile(x, 90, axis=1) + cupy.quantile(x, np.float32(0.5), axis=1)

    with cupy.cuda.Device(0):
        f = cg.jit(p90, config={**CONFIG, "host_uploads": "fallback"})
        for seed in range(3):
            x = fresh(seed, (8, 16))
            np.testing.assert_array_equal(cupy.asnumpy(f(x)), cupy.asnumpy(p90(x)))
        assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 0 and f.stats().baked_uploads == {}


def test_a_value_that_changes_between_warm_up_and_capture_is_refused_naming_the_line():
    runs = []

    def stamped(x):
        runs.append(float(len(runs)))
        return x + cupy.asarray([runs[-1]], dtype=cupy.float32)  # changing-line

    with cupy.cuda.Device(0):
        f = cg.jit(stamped, config=CONFIG)
        for seed in range(3):
            x = fresh(seed)
            before = len(runs)
            got = cupy.asnumpy(f(x))
            np.testing.assert_array_equal(got, cupy.asnumpy(x + np.float32(runs[before])))
        stats = f.stats()
        assert f.registry.num_graphs() == 0 and stats.baked_uploads == {}
        detail = stats.detail("host_upload")
        assert "bytes differed" in detail and "cupy.asarray of <f4[1]" in detail and "# changing-line" in detail


def test_what_auto_gives_up_data_that_changes_only_between_calls_is_frozen_at_capture():
    scale = [2.0]

    def scaled(x):
        return x * cupy.asarray(np.array(scale, dtype=np.float32))

    with cupy.cuda.Device(0):
        f = cg.jit(scaled, config=CONFIG)
        x = fresh(5)
        first = cupy.asnumpy(f(x))
        scale[0] = 3.0
        np.testing.assert_array_equal(cupy.asnumpy(f(x)), first)
        assert not np.array_equal(cupy.asnumpy(scaled(x)), first)


def bump_and_scale(x, counter):
    counter += 1  # a write into an array the function reads by address
    return x * cupy.asarray([0.5, 2.0, 4.0], dtype=cupy.float32)  # no-warmup-line


def test_an_upload_in_a_capture_without_warm_ups_is_refused_with_the_reason():
    with cupy.cuda.Device(0):
        f = cg.jit(bump_and_scale, constant_argnums=(1,), config=CONFIG)
        counter = cupy.zeros(1, dtype=cupy.float32)
        for seed in range(3):
            x = fresh(seed)
            want = cupy.asnumpy(x) * np.array([0.5, 2.0, 4.0], dtype=np.float32)
            np.testing.assert_array_equal(cupy.asnumpy(f(x, counter)), want)
            assert float(counter[0]) == seed + 1  # written once per call, as without jit
        stats = f.stats()
        assert f.registry.num_graphs() == 0 and stats.baked_uploads == {}
        detail = stats.detail("host_upload")
        assert "this capture runs no warm-up" in detail and "reads by address" in detail
        assert "# no-warmup-line" in detail


def test_fallback_stays_the_strict_way_out():
    with cupy.cuda.Device(0):
        f = cg.jit(convolve1d_literal, config={**CONFIG, "host_uploads": "fallback"})
        for seed in range(2):
            x = fresh(seed, (8, 16, 16))
            np.testing.assert_array_equal(cupy.asnumpy(f(x)), cupy.asnumpy(convolve1d_literal(x)))
        stats = f.stats()
        assert f.registry.num_graphs() == 0 and stats.fallbacks_by_reason == {"host_upload": 2}
        assert "# constant-line" in stats.detail("host_upload")
