"""Fallback reasons on the GPU name the user's own line (issue 11).

CuPy's compiled frames carry relative paths (``cupy/_core/core.pyx``) and no source line; the
reason must skip them and every other frame inside CuPy, cupyx and cupygraph, and name the line of
this file that made the op.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")


def _matmul(x):
    return x @ x.T  # line-marker: matmul


def _host_read(x):
    return x * float(x.sum())  # line-marker: host read


def _mask(x):
    return x[x > 0]  # line-marker: mask


def _legacy_random(x):
    return x + cupy.random.binomial(10, 0.5, size=x.shape).astype(cupy.float32)  # line-marker: curand (never routed)


def _line_of(marker: str) -> int:
    with open(__file__) as source:
        for number, line in enumerate(source, start=1):
            if f"line-marker: {marker}" in line and "def " not in line and "_line_of" not in line:
                return number
    raise AssertionError(marker)


@pytest.mark.parametrize(("fn", "marker", "code"), [
    (_matmul, "matmul", "library_call"),
    (_host_read, "host read", "device_to_host_read"),
    (_mask, "mask", None),
    (_legacy_random, "curand", "library_call"),
])
def test_a_fallback_names_the_users_line(fn, marker, code):
    with cupy.cuda.Device(0):
        # x @ x.T falls back only with routing off (issue 29 routes it: tests/gpu/test_routes_gpu.py)
        f = cg.jit(fn, config={"backend": "cupy", "max_capture_size": 8, "route_library_calls": marker != "matmul"})
        x = cupy.random.standard_normal((3, 4), dtype=cupy.float32)
        got = f(x)
        want = fn(x)
        if isinstance(got, cupy.ndarray) and marker != "curand":
            np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))
        stats = f.stats()
        assert f.registry.num_graphs() == 0 and stats.fallbacks == 1
        (reason,) = stats.fallbacks_by_reason
        if code is not None:
            assert reason == code
        detail = stats.last_detail_by_reason[reason]
        where = f"test_fallback_locations.py:{_line_of(marker)}"
        assert where in detail, detail
        assert ".pyx" not in detail, detail
