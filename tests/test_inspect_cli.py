"""Inspection on the host backend: describe(), to_dot(), render_dot and the inspect/dot/bench-config CLI."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph import inspect as cg_inspect
from cupygraph.cli import main


def test_describe_lists_graphs_per_mode_and_size_with_reasons():
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", max_capture_size=8))
    for n in (1, 3, 3, 20):
        f(np.ones((n, 2)))
    text = f.describe()
    assert "graphs=2" in text and "hit rate=25.0%" in text
    assert "FULL  1" in text and "FULL  4" in text
    assert "above the largest capture size 8" in text


def test_to_dot_picks_the_size_and_explains_missing_graphs(tmp_path):
    f = cg.jit(lambda x: x * 2, config=dict(backend="host", max_capture_size=8))
    with pytest.raises(LookupError, match="holds no graphs"):
        f.to_dot()
    f(np.ones((3, 2)))
    assert "host backend: no CUDA graph" in f.to_dot(3)
    with pytest.raises(LookupError, match=r"held sizes: \[4\]"):
        f.to_dot(7)
    out = cg_inspect.render_dot(f.to_dot(), tmp_path / "g.dot")
    assert out.read_text().startswith("digraph")


def test_render_without_graphviz_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cg_inspect.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="Graphviz is not installed"):
        cg_inspect.render_dot("digraph { a }", tmp_path / "g.svg")


def test_cli_inspect_dot_and_bench_config(capsys, tmp_path):
    assert main(["inspect", "--backend", "host", "--calls", "20"]) == 0
    assert "hit rate" in capsys.readouterr().out
    assert main(["dot", "--backend", "host", "--calls", "5", "-o", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert main(["bench-config", "configs/small.yaml", "--backend", "host", "--calls", "10", "--reps", "2"]) == 0
    out = capsys.readouterr().out
    assert "padded" in out and "speedup" in out


def test_cli_inspect_runs_a_user_script(capsys, tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(
        "import numpy as np, cupygraph as cg\n"
        "f = cg.jit(lambda x: x - 1, config=dict(backend='host', max_capture_size=4))\n"
        "for n in (1, 2, 2): f(np.ones((n, 3)))\n"
    )
    assert main(["inspect", "--script", str(script)]) == 0
    assert "calls=3 hits=1" in capsys.readouterr().out
