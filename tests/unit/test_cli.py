"""The ``cupygraph`` command line, run in-process through ``main`` (and once as ``python -m``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

import cupygraph
import cupygraph.backends
from cupygraph import cli
from cupygraph.cli import main
from cupygraph.config.files import load_config
from cupygraph.config.model import CUDAGraphConfig

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(str(p) for p in (REPO / "configs").glob("*.yaml"))
BAD = REPO / "tests" / "unit" / "data" / "bad_configs"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- validate --------------------------------------------------------------------------------------


def test_validate_good_files(capsys):
    code, out, err = run(capsys, "validate", *CONFIGS)
    assert code == 0 and err == ""
    assert out.splitlines() == [f"ok {path}" for path in CONFIGS]


def test_validate_bad_file(capsys):
    bad = str(BAD / "negative_size.yaml")
    code, out, err = run(capsys, "validate", bad)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == (
        f"{bad}:6: field 'capture_sizes[2]': Input should be greater than or equal to 1 (got -4)"
    )
    assert lines[-1] == "1 of 1 config files invalid"
    assert "Traceback" not in err


def test_validate_mixed_reports_every_file(capsys):
    good, bad, broken = CONFIGS[0], str(BAD / "many_errors.yaml"), str(BAD / "broken.json")
    code, out, err = run(capsys, "validate", good, bad, broken, "does-not-exist.yaml")
    assert code == 1
    assert out.splitlines() == [f"ok {good}"]
    lines = err.splitlines()
    assert sum(line.startswith(bad) for line in lines) == 3  # one line per problem
    assert any(line.startswith(f"{broken}:4: invalid JSON") for line in lines)
    assert "does-not-exist.yaml: config file not found" in lines
    assert lines[-1] == "3 of 4 config files invalid"


def test_validate_every_bad_corpus_file_fails_cleanly(capsys):
    files = sorted(str(p) for p in BAD.iterdir() if p.name != "expected.yaml")
    code, out, err = run(capsys, "validate", *files)
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == f"{len(files)} of {len(files)} config files invalid"
    assert all(f in err for f in files)
    assert "Traceback" not in err


def test_validate_needs_a_file(capsys):
    code, _out, err = run(capsys, "validate")
    assert code == 2 and "FILE" in err


# -- show ------------------------------------------------------------------------------------------


def test_show_yaml(capsys):
    path = str(REPO / "configs" / "serving.yaml")
    code, out, err = run(capsys, "show", path)
    assert code == 0 and err == ""
    view = yaml.safe_load(out)
    expected = load_config(path)
    assert view["source"] == path
    assert view["config"]["mode"] == "FULL_AND_PIECEWISE"
    assert view["resolved"]["cudagraph_capture_sizes"] == list(expected.cudagraph_capture_sizes)
    assert view["resolved"]["num_capture_sizes"] == len(expected.cudagraph_capture_sizes)
    assert view["resolved"]["mode"] == {
        "name": "FULL_AND_PIECEWISE", "decode_mode": "FULL", "mixed_mode": "PIECEWISE",
        "separate_routine": True, "max_cudagraph_mode": "FULL", "has_graphs": True,
        "has_full_cudagraphs": True, "has_piecewise_cudagraphs": True, "valid_runtime_mode": False,
    }
    # What show prints under `config` is itself a valid config that resolves the same way.
    assert CUDAGraphConfig.from_dict(view["config"]) == expected


def test_show_json_of_defaults(capsys):
    code, out, _err = run(capsys, "show", "--json")
    assert code == 0
    view = json.loads(out)
    assert view["source"] == "<defaults>"
    assert len(view["resolved"]["cudagraph_capture_sizes"]) == 51
    assert view["resolved"]["largest_capture_size"] == 512
    assert view["resolved"]["mode"]["name"] == "FULL"
    assert view["resolved"]["capture_sizes_by_mode"] == {"FULL": view["resolved"]["cudagraph_capture_sizes"]}


def test_show_lists_each_modes_sizes_under_speculative_decoding(capsys, tmp_path):
    """Issue 33: the uniform-decode FULL graphs sit on their own sizes; show says which."""
    path = tmp_path / "spec.yaml"
    path.write_text("mode: FULL_AND_PIECEWISE\ncapture_sizes: [1, 2, 4, 8, 16, 24]\nmax_num_reqs: 8\n"
                    "uniform_decode_query_len: 3\n", encoding="utf-8")
    code, out, _ = run(capsys, "show", "--json", str(path))
    resolved = json.loads(out)["resolved"]
    assert code == 0 and resolved["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16, 24]
    assert resolved["capture_sizes_by_mode"] == {"PIECEWISE": [1, 2, 4, 8, 16, 24], "FULL": [3, 6, 9, 18, 24]}


def test_show_disabled_has_no_sizes(capsys):
    code, out, _ = run(capsys, "show", "--json", str(REPO / "configs" / "disabled.yaml"))
    view = json.loads(out)
    assert code == 0 and view["resolved"]["cudagraph_capture_sizes"] == []
    assert view["resolved"]["largest_capture_size"] is None and view["resolved"]["capture_sizes_by_mode"] == {}
    assert view["resolved"]["mode"]["has_graphs"] is False


def test_show_reports_env_disable(capsys, monkeypatch):
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    code, out, _ = run(capsys, "show", "--json")
    assert code == 0 and json.loads(out)["resolved"]["disabled_by_env"] is True


def test_show_bad_file_is_an_error_without_traceback(capsys):
    bad = str(BAD / "bad_mode.yaml")
    code, out, err = run(capsys, "show", bad)
    assert code == 1 and out == ""
    assert err.startswith(f"{bad}:1: field 'mode'") and "Traceback" not in err


# -- schema ----------------------------------------------------------------------------------------


def test_schema_is_json_with_indent_2(capsys):
    code, out, err = run(capsys, "schema")
    assert code == 0 and err == ""
    schema = json.loads(out)
    assert schema == CUDAGraphConfig.model_json_schema()
    assert out.startswith('{\n  "')
    assert schema["additionalProperties"] is False and "capture_sizes" in schema["properties"]


# -- demo ------------------------------------------------------------------------------------------


def test_demo_passes_options_to_demo_main(capsys, monkeypatch):
    seen = {}

    def fake_main(args):
        seen.update(vars(args))
        return 0

    monkeypatch.setitem(sys.modules, "cupygraph.demo", types.SimpleNamespace(main=fake_main))
    code, _, _ = run(capsys, "demo", "--backend", "host", "--config", "c.yaml", "--calls", "7")
    assert code == 0
    assert (seen["backend"], seen["config"], seen["calls"]) == ("host", "c.yaml", 7)


def test_demo_exit_status_and_config_errors(capsys, monkeypatch):
    def failing_main(args):
        CUDAGraphConfig.from_dict({"num_warmups": -1}, source=args.config)

    monkeypatch.setitem(sys.modules, "cupygraph.demo", types.SimpleNamespace(main=failing_main))
    code, _, err = run(capsys, "demo", "--config", "x.yaml")
    assert code == 1 and err.startswith("x.yaml: field 'num_warmups'") and "Traceback" not in err
    monkeypatch.setitem(sys.modules, "cupygraph.demo", types.SimpleNamespace(main=lambda args: 3))
    assert run(capsys, "demo")[0] == 3


def test_demo_missing_module_is_a_clean_error(capsys, monkeypatch):
    # A None entry in sys.modules makes `import cupygraph.demo` raise ModuleNotFoundError.
    monkeypatch.setitem(sys.modules, "cupygraph.demo", None)
    code, _, err = run(capsys, "demo")
    assert code == 1 and "demo is not available" in err


@pytest.mark.parametrize("argv", [["demo", "--backend", "torch"], ["demo", "--calls", "0"], ["demo", "--calls", "x"]])
def test_demo_bad_options(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "usage:" in err


# -- errors, never tracebacks -----------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch):
    """cupygraph's GPU probe answers as on a machine without CuPy (also on a GPU machine)."""
    monkeypatch.setattr(cupygraph.backends, "gpu_unavailable_reason",
                        lambda: "CuPy is not importable (ModuleNotFoundError: No module named 'cupy')")


@pytest.mark.parametrize("argv", [
    ["demo", "--backend", "cupy"],
    ["inspect", "--backend", "cupy"],
    ["dot", "--backend", "cupy"],
    ["bench-config", str(REPO / "configs" / "small.yaml"), "--backend", "cupy"],
])
def test_backend_cupy_without_cupy_is_one_clear_line(capsys, no_gpu, argv):
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"cupygraph {argv[0]}: the cupy backend was asked for (--backend cupy), but CuPy is not importable "
        f"(ModuleNotFoundError: No module named 'cupy'); use --backend host, or auto"
    ]


@pytest.mark.parametrize("command", ["demo", "inspect", "bench-config"])
def test_a_config_asking_for_cupy_is_not_silently_run_on_the_host(capsys, tmp_path, no_gpu, command):
    config = tmp_path / "gpu.yaml"
    config.write_text("backend: cupy\nmax_capture_size: 8\n")
    argv = [command, str(config)] if command == "bench-config" else [command, "--config", str(config)]
    code, out, err = run(capsys, *argv, "--calls", "2")
    assert code == 1 and out == ""
    assert err.startswith(f"cupygraph {command}: the cupy backend was asked for ({config}: field 'backend'), but ")
    # --backend overrides the config's field
    code, out, err = run(capsys, *argv, "--calls", "2", "--backend", "host")
    assert code == 0 and "host backend" in out, err


SIZES_SCRIPT = """\
import numpy as np, cupygraph as cg
f = cg.jit(lambda x: x * 2, config=dict(backend="host", capture_sizes=[1, 2, 4, 8], mode="{mode}"))
for n in (1, 2, 2):
    f(np.ones((n, 3)))
"""


@pytest.mark.parametrize("mode, size, message", [
    ("FULL", "3", "no graph held for batch 3 (padded to 4); held sizes: [1, 2]"),
    ("FULL", "9", "batch 9 is above the largest capture size 8: it runs eagerly, without a graph; held sizes: [1, 2]"),
    ("NONE", "2", "<lambda> holds no graphs: it runs eagerly (its config has mode NONE)"),
])
def test_dot_for_a_size_without_a_graph_lists_the_sizes_held(capsys, tmp_path, mode, size, message):
    script = tmp_path / "sizes.py"
    script.write_text(SIZES_SCRIPT.format(mode=mode))
    code, out, err = run(capsys, "dot", "--script", str(script), "--size", size)
    assert code == 1 and out == ""
    assert err.splitlines() == [f"cupygraph dot: {message}"]


def test_ctrl_c_stops_with_status_130_and_no_traceback(capsys, tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text("raise KeyboardInterrupt\n")
    try:
        code, _, err = run(capsys, "inspect", "--script", str(script))
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped cupygraph's main()")
    assert code == 130 and err.splitlines() == ["cupygraph inspect: interrupted"]


def test_python_dash_m_backend_cupy_without_cupy_has_no_traceback():
    if cupygraph.gpu_available():
        pytest.skip("CuPy and a GPU are usable here: --backend cupy runs")
    result = subprocess.run(
        [sys.executable, "-m", "cupygraph", "inspect", "--backend", "cupy"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("cupygraph inspect: the cupy backend was asked for (--backend cupy), but ")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


# -- the rest --------------------------------------------------------------------------------------


def test_no_command_prints_help(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out == "" and "validate" in err and "schema" in err


def test_help_exits_zero(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "validate" in out


def test_unknown_command(capsys):
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err


def test_library_modules_do_not_print():
    package = REPO / "cupygraph"
    # The CLI, its script runner and the demo report to the terminal; every library module is quiet.
    talkers = {"cli.py", "cli_plan_sizes.py", "script.py", "demo.py", "__main__.py"}
    for path in sorted(package.rglob("*.py")):
        if path.name in talkers and path.parent == package:
            continue
        text = path.read_text(encoding="utf-8")
        calls = re.findall(r"(?<![\w.\"'])print\(", text)  # a call, not a word inside a message
        assert not calls, f"{path.relative_to(REPO)} prints; only the CLI may"
    assert hasattr(cli, "main")


def test_python_dash_m_validate():
    result = subprocess.run(
        [sys.executable, "-m", "cupygraph", "validate", *CONFIGS],
        cwd=REPO, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"ok {path}" for path in CONFIGS]
    bad = subprocess.run(
        [sys.executable, "-m", "cupygraph", "validate", str(BAD / "zero_size.yaml")],
        cwd=REPO, capture_output=True, text=True,
    )
    assert bad.returncode == 1 and "capture_sizes[0]" in bad.stderr and "Traceback" not in bad.stderr


def test_a_bad_cupygraph_log_value_warns_instead_of_breaking_the_import():
    """Regression (issue 11): CUPYGRAPH_LOG=bogus made ``import cupygraph`` raise, so every CLI
    command failed with a traceback."""
    env = {k: v for k, v in os.environ.items() if k != "CUPYGRAPH_DISABLE"}
    env["CUPYGRAPH_LOG"] = "bogus"
    result = subprocess.run([sys.executable, "-m", "cupygraph", "show"], capture_output=True, text=True,
                            env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "CUPYGRAPH_LOG='bogus' is not a logging level" in result.stderr
    assert "Traceback" not in result.stderr
