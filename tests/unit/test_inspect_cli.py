"""Inspection on the host backend: describe(), to_dot(), render_dot and the inspect/dot/bench-config CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.cli import main
from cupygraph.diagnostics import inspect as cg_inspect

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_describe_lists_graphs_per_mode_and_size_with_reasons():
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", max_capture_size=8))
    for n in (1, 3, 3, 20):
        f(np.ones((n, 2)))
    text = f.describe()
    assert "graphs=2" in text and "hit rate=25.0%" in text
    assert "FULL  1" in text and "FULL  4" in text
    assert "above the largest capture size 8" in text


def _replay_time_cell(text: str, size: int) -> str:
    header, _, *rows = text.splitlines()[2:]
    start = header.index("avg replay (host)")
    row = next(r for r in rows if r.split()[:2] == ["FULL", str(size)])
    return row[start:start + len("avg replay (host)")].strip()


def test_describe_says_replay_time_was_not_measured_unless_time_replays_is_on():
    untimed = cg.jit(lambda x: x + 1, config=dict(backend="host", max_capture_size=8))
    timed = cg.jit(lambda x: x + 1, config=dict(backend="host", max_capture_size=8, time_replays=True))
    for f in (untimed, timed):
        for _ in range(3):
            f(np.ones((4, 2)))
    assert _replay_time_cell(untimed.describe(), 4) == "-"  # not a 0.0 us that reads as measured
    measured = _replay_time_cell(timed.describe(), 4)
    assert measured.endswith(" us") and float(measured.split()[0]) > 0.0


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
    small = str(Path(__file__).resolve().parents[2] / "configs/small.yaml")  # whatever the working directory
    assert main(["bench-config", small, "--backend", "host", "--calls", "10", "--reps", "2"]) == 0
    out = capsys.readouterr().out
    assert "padded" in out and "speedup" in out


ARGPARSE_SCRIPT = """\
import argparse, sys
import numpy as np
import cupygraph as cg

parser = argparse.ArgumentParser()
parser.add_argument("--sizes", type=int, nargs="+", required=True)
args = parser.parse_args()
print("SCRIPT ARGV", sys.argv)
f = cg.jit(lambda x: x - 1, config=dict(backend="host", max_capture_size=4))
for n in args.sizes:
    f(np.ones((n, 3)))
"""


def test_cli_script_gets_its_own_arguments_after_double_dash(capsys, tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(ARGPARSE_SCRIPT)
    argv, path = list(sys.argv), list(sys.path)
    assert main(["inspect", "--script", str(script), "--", "--sizes", "3", "4", "4"]) == 0
    out = capsys.readouterr().out
    assert f"SCRIPT ARGV {[str(script), '--sizes', '3', '4', '4']}" in out
    assert "calls=3 hits=2" in out  # 3 is padded to 4 and captured; both 4s replay it
    assert (sys.argv, sys.path) == (argv, path)


def test_cli_dot_passes_arguments_to_the_script(capsys, tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(ARGPARSE_SCRIPT)
    assert main(["dot", "--script", str(script), "-o", str(tmp_path / "g.dot"), "--", "--sizes", "3"]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")


EXAMPLE_ARGS = {  # small runs of each shipped example, on the host backend where no GPU is found
    "heat_equation.py": ["--calls", "6", "--max-batch", "4"],
    "serving_loop.py": ["--steps", "8"],
    "cg_poisson.py": ["--n", "8", "--repeats", "1"],
    "mlp_full.py": ["--calls", "6", "--max-batch", "16"],
    "monte_carlo.py": ["--calls", "6", "--paths", "2000", "--max-batch", "8"],
    "distributed_heat.py": ["--n", "16", "--steps", "2", "--calls", "2", "--backend", "host"],
    "distributed_cg.py": ["--n", "16", "--per-call", "4", "--backend", "host"],
    "dask_cuda_pipeline.py": ["--tasks", "2"],
    "unchanged_cupy.py": ["--calls", "6", "--max-batch", "8"],
}
# Examples that need an optional package (skipped without it).
EXAMPLE_NEEDS = {"distributed_heat.py": "mpi4py", "distributed_cg.py": "mpi4py", "dask_cuda_pipeline.py": "dask_cuda"}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_cli_inspects_every_shipped_example(capsys, example):
    if example not in EXAMPLE_ARGS:
        pytest.fail(f"examples/{example} is new: add small arguments for it to EXAMPLE_ARGS")
    if example in EXAMPLE_NEEDS:
        pytest.importorskip(EXAMPLE_NEEDS[example], reason=f"examples/{example} needs {EXAMPLE_NEEDS[example]}")
    argv = list(sys.argv)
    code = main(["inspect", "--script", str(EXAMPLES / example), "--", *EXAMPLE_ARGS[example]])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "hit rate=" in out and "Traceback" not in err
    assert sys.argv == argv


def test_cli_script_failures_are_the_scripts_own_messages(capsys, tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(ARGPARSE_SCRIPT)
    assert main(["inspect", "--script", str(script), "--", "--sizes", "1", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err
    assert err.splitlines()[-1] == f"cupygraph inspect: --script {script} exited with status 2"

    raising = tmp_path / "raising.py"
    raising.write_text("def load():\n    raise ValueError('no data in input.npy')\nload()\n")
    assert main(["inspect", "--script", str(raising)]) == 1
    err = capsys.readouterr().err
    assert f'File "{raising}", line 3' in err and "ValueError: no data in input.npy" in err
    assert "cupygraph" not in err.split(str(raising))[0]  # the traceback starts in the script
    assert err.splitlines()[-1] == f"cupygraph inspect: --script {raising} raised ValueError (its traceback is above)"

    quiet = tmp_path / "quiet.py"
    quiet.write_text("import sys\nsys.exit(0)\n")
    assert main(["inspect", "--script", str(quiet)]) == 1
    assert "created no cupygraph.jit functions" in capsys.readouterr().err
    assert main(["inspect", "--script", str(tmp_path / "missing.py")]) == 1
    assert f"--script {tmp_path / 'missing.py'}: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("argv, problem", [
    (["inspect", "--", "--steps", "3"], "arguments after '--' (--steps 3) are for a --script"),
    (["dot", "--script", "x.py", "--calls", "3"], "--calls applies to the demo workload, not to a --script"),
    (["inspect", "--script", "x.py", "--backend", "host", "--config", "c.yaml"],
     "--backend, --config apply to the demo workload"),
])
def test_cli_script_options_that_do_not_go_together(capsys, argv, problem):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage:" in err and problem in err
