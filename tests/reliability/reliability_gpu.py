"""GPU helpers of the reliability suite; imported only by modules that already skipped without CuPy."""

from __future__ import annotations

import gc
import os
from typing import Any

import cupy
import numpy as np


def rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> Any:
    """Fresh random device data (never zeros)."""
    return cupy.asarray(rng.standard_normal(shape).astype(dtype))


def assert_same(got: Any, want: Any, exact: bool = True) -> None:
    got, want = cupy.asnumpy(got), cupy.asnumpy(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def rss_bytes() -> int:
    """Current resident set size of this process (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def memory_figures(backend: Any = None) -> dict[str, int]:
    """Device and host memory figures to compare before/after: the family's pool (cupygraph's
    account and CuPy's own), CuPy's default pool, free device memory, host RSS, Python objects."""
    gc.collect()
    default = cupy.get_default_memory_pool()
    free, _total = cupy.cuda.runtime.memGetInfo()
    figures = {
        "default_pool_used": int(default.used_bytes()),
        "default_pool_total": int(default.total_bytes()),
        "device_free": int(free),
        "rss": rss_bytes(),
        "python_objects": len(gc.get_objects()),
    }
    if backend is not None:
        figures["family_pool_bytes"] = int(backend.pool_bytes())
        pool = getattr(backend, "pool", None)
        if pool is not None:
            figures["family_pool_total"] = int(pool.total_bytes())
            figures["family_pool_used"] = int(pool.used_bytes())
    return figures


def drift(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before if key in after}


def stream_usable(stream: Any = None) -> None:
    """The stream is not capturing and runs a kernel with the right result."""
    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    assert not stream.is_capturing()
    with stream:
        probe = cupy.arange(1024, dtype=cupy.float32)
        total = float((probe * 2).sum())
    stream.synchronize()
    assert total == 2 * 1023 * 1024 / 2
