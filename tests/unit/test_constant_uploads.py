"""Constant host data captured under the default config (issue 29): ``host_uploads="auto"``.

Data that is the same in every warm-up and the capture (a literal, ``np.linspace`` of constants, a
list ``q``) is baked into the graph; data that changes between them is still refused, naming the
user's line, and so is every upload of a capture that runs no warm-up (nothing to compare).
``tests/gpu/test_constant_uploads_gpu.py`` checks the same on the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.config.model import CUDAGraphConfig

CONFIG = {"backend": "host", "max_capture_size": 8}


def data(seed, rows=4):
    return np.random.default_rng(seed).standard_normal((rows, 3))


def literal_list(x):
    return x * np.asarray([0.5, -1.25, 2.0])  # constant-line


def literal_ints(x):
    return x + np.array([[1, 2, 3]], dtype=np.int32)  # constant-line


def linspace_of_constants(x):
    return x * np.asarray(np.linspace(0.0, 1.0, 3))  # constant-line


def percentile_list(x):
    return np.percentile(x, [25, 75], axis=1)  # constant-line


def test_auto_is_the_default():
    assert CUDAGraphConfig().host_uploads == "auto"


@pytest.mark.parametrize(("fn", "nbytes"), [
    (literal_list, 24), (literal_ints, 12), (linspace_of_constants, 24), (percentile_list, 16),
])
def test_constant_host_data_is_captured_by_default_and_replays_as_the_plain_function(fn, nbytes):
    f = cg.jit(fn, config=CONFIG)
    for seed in range(4):
        x = data(seed)
        np.testing.assert_array_equal(f(x), fn(x))
    stats = f.stats()
    assert f.registry.num_graphs() == 1 and stats.fallbacks == 0 and stats.replays == 3  # the first captured
    ((call, baked),) = stats.baked_uploads.items()
    assert baked == nbytes and "(at test_constant_uploads.py:" in call and "# constant-line" in call


def test_a_value_that_changes_between_warm_up_and_capture_is_refused_naming_the_line():
    runs: list[float] = []

    def stamped(x):
        runs.append(float(len(runs)))
        return x + np.asarray([runs[-1]])  # changing-line

    f = cg.jit(stamped, config=CONFIG)
    for seed in range(3):
        x = data(seed)
        before = len(runs)
        np.testing.assert_array_equal(f(x), x + runs[before])  # the call's own run is its result
    stats = f.stats()
    assert f.registry.num_graphs() == 0 and stats.baked_uploads == {}
    assert stats.fallbacks_by_reason["host_upload"] >= 1
    detail = stats.detail("host_upload")
    assert "bytes differed" in detail and "numpy.asarray of <f8[1]" in detail and "# changing-line" in detail


def test_what_auto_gives_up_data_that_changes_only_between_calls_is_frozen_at_capture():
    # The documented limit of "auto": a value that is the same in the warm-ups and the capture but
    # changes between calls looks constant, and the graph keeps the capture's.
    scale = [2.0]

    def scaled(x):
        return x * np.asarray(scale)

    f = cg.jit(scaled, config=CONFIG)
    x = data(0)
    first = f(x)
    scale[0] = 3.0
    np.testing.assert_array_equal(f(x), first)
    assert not np.array_equal(scaled(x), first)
    ((_, nbytes),) = f.stats().baked_uploads.items()
    assert nbytes == 8


def bump_and_scale(x, counter):
    counter += 1  # a write into an array the function reads by address
    return x * np.asarray([0.5, 2.0, 4.0])  # no-warmup-line


def test_an_upload_in_a_capture_without_warm_ups_is_refused_with_the_reason():
    # The call's own run writes into ``counter`` (a constant argument, read by address), so its capture
    # runs no warm-up (cache/first_call.py): auto has nothing to compare the bytes with.
    f = cg.jit(bump_and_scale, constant_argnums=(1,), config=CONFIG)
    counter = np.zeros(1)
    for seed in range(3):
        x = data(seed)
        np.testing.assert_array_equal(f(x, counter), x * np.array([0.5, 2.0, 4.0]))
        assert counter[0] == seed + 1  # written once per call, as without jit
    stats = f.stats()
    assert f.registry.num_graphs() == 0 and stats.baked_uploads == {}
    detail = stats.detail("host_upload")
    assert "this capture runs no warm-up" in detail and "reads by address" in detail
    assert "# no-warmup-line" in detail and "num_warmups >= 1" not in detail


def test_fallback_stays_the_strict_way_out():
    f = cg.jit(literal_list, config={**CONFIG, "host_uploads": "fallback"})
    for seed in range(2):
        x = data(seed)
        np.testing.assert_array_equal(f(x), literal_list(x))
    stats = f.stats()
    assert f.registry.num_graphs() == 0 and stats.fallbacks_by_reason == {"host_upload": 2}
    assert "# constant-line" in stats.detail("host_upload")
