"""The examples run end to end on the host backend (and on the GPU where there is one)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from repo_files import load_example

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    return load_example(name)


def test_heat_equation_example_matches_eager(capsys):
    result = load("heat_equation").main(["--calls", "40", "--max-batch", "16"])
    assert result["worst"] == 0.0
    assert result["calls"] == 40 and result["graphs"] >= 3 and result["hit_rate"] > 0.5
    assert "hit rate" in capsys.readouterr().out


def test_serving_loop_uses_both_graph_families(capsys):
    result = load("serving_loop").main(["--steps", "60"])
    assert result["worst"] == 0.0  # the eager step on the padded batch, bit for bit
    assert 0.0 <= result["worst_unpadded"] < 1e-3  # the prefill matmul's rounding at another row count only
    assert result["replays_by_mode"].get("FULL", 0) > 0 and result["replays_by_mode"].get("PIECEWISE", 0) > 0
    assert result["fallbacks"] == 0


def dense_poisson_solve(b: np.ndarray) -> np.ndarray:
    """x with A x = b for the 5-point Laplacian, by a dense solve: independent of the example's CG."""
    n = b.shape[-1]
    eye = np.eye(n)
    second_difference = 2 * eye - np.eye(n, k=1) - np.eye(n, k=-1)
    laplacian = np.kron(eye, second_difference) + np.kron(second_difference, eye)
    return np.linalg.solve(laplacian, b.reshape(-1)).reshape(b.shape)


def test_cg_poisson_example_solves_the_system():
    module = load("cg_poisson")
    n, tol = 12, 1e-10
    solve = module.make_solver(config={"backend": "host"})
    for seed in (0, 1):  # the second right-hand side is a replay of the first one's graph
        b = module.poisson_rhs(np, n, seed=seed)
        x, iterations, rr = solve(b, tol, 10 * n)
        x_ref, iterations_ref, rr_ref = module.cg_host_loop(b, tol, 10 * n)
        assert 0 < int(iterations) == iterations_ref < 10 * n, "converged before the cap, as the host loop does"
        assert float(rr) < tol * tol and float(rr) == rr_ref
        np.testing.assert_array_equal(x, x_ref)  # the graphed solve is the host loop's, step for step
        assert module.residual_norm(b, x) < 10 * tol
        np.testing.assert_allclose(x, dense_poisson_solve(b), rtol=0, atol=1e-8)
    assert solve.stats().hits >= 1


def test_cg_poisson_example_reports_the_residuals_it_reached(capsys):
    load("cg_poisson").main(["--n", "16", "--repeats", "1", "--tol", "1e-6"])
    out = capsys.readouterr().out
    recomputed = [float(v) for v in re.findall(r"recomputed ([0-9.eE+-]+)\)", out)]
    assert len(recomputed) == 2 and all(r < 1e-5 for r in recomputed), out  # jit and host-checked solves
    assert re.search(r"graphs captured 1, fallbacks 0", out), out


def test_dask_cuda_example_imports_and_needs_dask_cuda_only_to_run():
    # dask-cuda is not installed here (the GPU session runs the example). The module must import
    # without it (dask and CuPy are imported inside the functions), and main() must need dask_cuda.
    import importlib.util
    from types import SimpleNamespace

    import pytest

    module = load("dask_cuda_pipeline")
    assert callable(module.task) and module.worker_stats(SimpleNamespace()) == {}  # a worker before its first task
    if importlib.util.find_spec("dask_cuda") is None:
        with pytest.raises(ImportError):
            module.main(["--tasks", "1"])
    else:
        pytest.skip("dask_cuda is installed: run the example itself on a GPU machine")


def test_distributed_heat_example_matches_one_rank_on_a_single_rank_job():
    # One rank (no mpiexec): the slab is the whole grid, so this checks the stencil and the graph
    # path; tests/unit/test_distributed_mpi.py and the GPU session run it on two ranks.
    import pytest

    pytest.importorskip("mpi4py", reason="mpi4py is not installed (make test installs it)")
    result = load("distributed_heat").main(["--n", "32", "--steps", "4", "--calls", "2", "--backend", "host"])
    assert result["worst"] == 0.0 and result["changed"] > 0


def test_unchanged_cupy_example_graphs_its_products_without_a_rewrite(capsys):
    result = load("unchanged_cupy").main(["--calls", "30", "--max-batch", "16", "--backend", "host"])
    assert result["fallbacks"] == 0 and result["graphs"] >= 2 and result["hit_rate"] > 0.5
    assert result["worst"] == 0.0  # replays: the eager call on the same padded rows, bit for bit
    # `x @ w1` and the einsum, each noted with its line, in every graph captured
    assert len(result["routed"]) == 2 and set(result["routed"].values()) == {result["graphs"]}
    assert "library calls routed" in capsys.readouterr().out
