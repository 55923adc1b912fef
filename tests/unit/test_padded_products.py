"""What cupygraph promises for products of a padded batch (issue 27; RELIABILITY.md, promise 1).

A GEMM's rounding depends on its row count: BLAS and cuBLAS pick kernels, blockings and thread
splits by shape, CPU or GPU model and thread count, so a padded product and the unpadded one may
sum in different orders. What holds on any of them, and what these tests assert:

* a replay is the eager call of the same function on the same padded batch, bit for bit;
* against the eager call at the real rows, a GEMM's elements agree within 2 γ_k (|A| @ |B|)
  (``replay_helpers.gemm_bound``), the bound of any order of summation; per-matrix solvers
  (``cupygraph.linalg.inv``/``solve`` on the host) agree bit for bit.

The last test reruns these (and the examples' checks) under the OpenBLAS kernels and thread counts
of other machines, as a 2-core Haswell host picks them.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from replay_helpers import AsItIs, eager_at_padded_size, gemm_bound

import cupygraph as cg

ROOT = Path(__file__).resolve().parents[2]
HOST = {"backend": "host", "mode": "FULL", "capture_sizes": [4, 8, 16, 32]}
GEMMS = {
    "matmul": lambda x, w: cg.matmul(x, w),
    "gemm": lambda x, w: cg.linalg.gemm(x, w, alpha=1.0),
    "tensordot": lambda x, w: cg.linalg.tensordot(x, w, axes=1),
    "einsum": lambda x, w: cg.linalg.einsum("bi,ij->bj", x, w),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(GEMMS))
def test_a_padded_gemm_is_the_padded_eager_call_and_within_the_bound_of_the_unpadded_one(name, dtype):
    fn = GEMMS[name]
    rng = np.random.default_rng(3)
    w = rng.standard_normal((48, 24)).astype(dtype)
    graphed = cg.jit(fn, constant_argnums=1, config=HOST)
    as_it_is = AsItIs(graphed)
    for n in (3, 13, 29, 32, 7, 13):
        x = rng.standard_normal((n, 48)).astype(dtype)
        plain = as_it_is(x, w)
        got = graphed(x, w)
        np.testing.assert_array_equal(got, fn(x, w) if plain else eager_at_padded_size(graphed, x, w))
        difference = np.abs(got.astype(np.float64) - fn(x, w))
        assert (difference <= gemm_bound(x, w)).all(), float(difference.max())
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits >= 1


def test_a_numpy_matmul_in_an_eager_step_keeps_the_same_promise():
    matmul = cg.graph_break(np.matmul)
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    graphed = cg.jit(lambda x, w: matmul(x * 0.5, w), constant_argnums=1, config={**HOST, "mode": "PIECEWISE"})
    as_it_is = AsItIs(graphed)
    for n in (5, 17, 5, 30):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        plain = as_it_is(x, w)
        got = graphed(x, w)
        np.testing.assert_array_equal(got, (x * 0.5) @ w if plain else eager_at_padded_size(graphed, x, w))
        assert (np.abs(got.astype(np.float64) - (x * 0.5) @ w) <= gemm_bound(x * 0.5, w)).all()
    assert graphed.stats().fallbacks == 0


@pytest.mark.parametrize("op", ["inv", "solve"])
def test_per_matrix_solvers_of_a_padded_batch_equal_the_unpadded_call(op):
    fn = {"inv": lambda a: cg.linalg.inv(a), "solve": lambda a: cg.linalg.solve(a, a[..., 0])}[op]
    graphed = cg.jit(fn, config=HOST)
    rng = np.random.default_rng(5)
    for n in (3, 9, 3):
        a = rng.standard_normal((n, 4, 4)) + 4 * np.eye(4)
        np.testing.assert_array_equal(graphed(a), fn(a))  # the host solves one matrix at a time
    assert graphed.stats().fallbacks == 0


def _openblas() -> bool:
    try:
        config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # an older NumPy or an unusual build: nothing to vary
        return False
    return "openblas" in str(config.get("name", "")).lower()


def _core_types() -> list[str]:
    """OpenBLAS kernels this CPU runs: Prescott (SSE3) on every x86-64, Haswell where AVX2 is."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return [""]
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return ["Prescott", "Haswell"] if " avx2" in flags else ["Prescott"]


@pytest.mark.skipif(not _openblas(), reason="NumPy is not built with OpenBLAS: its kernels cannot be chosen here")
@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_promise_holds_whatever_kernels_and_threads_openblas_uses(threads):
    selected = [
        "tests/unit/test_padded_products.py::test_a_padded_gemm_is_the_padded_eager_call_and_within_the_bound_of"
        "_the_unpadded_one",
        "tests/unit/test_padded_products.py::test_a_numpy_matmul_in_an_eager_step_keeps_the_same_promise",
        "tests/unit/test_linalg_host.py::test_matmul_runs_in_a_full_host_graph_where_raw_matmul_is_refused_with_routing_off",
        "tests/unit/test_linalg_host.py::test_mlp_example_runs_on_the_host_backend",
        "tests/unit/test_examples.py::test_serving_loop_uses_both_graph_families",
    ]
    for core in _core_types():
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads}
        if core:
            env["OPENBLAS_CORETYPE"] = core
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                                 *selected], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        setup = f"OPENBLAS_CORETYPE={core} OPENBLAS_NUM_THREADS={threads}"
        assert result.returncode == 0, f"{setup}:\n{result.stdout[-3000:]}"
