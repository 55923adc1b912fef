"""The examples run end to end on the host backend (and on the GPU where there is one)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_heat_equation_example_matches_eager(capsys):
    result = load("heat_equation").main(["--calls", "40", "--max-batch", "16"])
    assert result["worst"] == 0.0
    assert result["calls"] == 40 and result["graphs"] >= 3 and result["hit_rate"] > 0.5
    assert "hit rate" in capsys.readouterr().out


def test_serving_loop_uses_both_graph_families(capsys):
    result = load("serving_loop").main(["--steps", "60"])
    assert result["worst"] < 1e-5
    assert result["replays_by_mode"].get("FULL", 0) > 0 and result["replays_by_mode"].get("PIECEWISE", 0) > 0
    assert result["fallbacks"] == 0


def test_cg_poisson_example_runs(capsys):
    module = load("cg_poisson")
    module.main(["--n", "16", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "iterations" in out
