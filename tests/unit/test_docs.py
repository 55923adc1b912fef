"""The docs must not drift from the code: the config reference, the setup and test commands, the
default sizes, and every README snippet that can run without a GPU (CI runs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_files import load_tool, needs_make, run_make

import cupygraph as cg

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _load_snippet_tool():
    # By path, not through sys.path: the tool owns the README's snippet rules.
    return load_tool("readme_quickstart")


readme_quickstart = _load_snippet_tool()
SNIPPETS = readme_quickstart.readme_snippets()

def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_config_reference_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_opens_with_the_two_setup_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    assert "linters" in block[1], "the README must say that `make test` also runs the linters"


@needs_make
def test_make_test_runs_the_commands_the_readme_lists():
    # `make -n` prints what `make test` would run; an empty STAMP skips the install step.
    dry = run_make("-n", "test", "TEST_STAMP=")
    assert dry.returncode == 0, dry.stderr
    ran = [line.split(" || ")[0].strip() for line in dry.stdout.splitlines() if line.startswith(".venv/bin/python")]
    block = re.search(r"```bash\n(.*?)```", readme_section("Running the tests"), re.S)
    assert block is not None
    documented = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    assert ran == documented
    assert any(cmd.endswith("-m pytest -p randomly") for cmd in ran), "the suite must run in random order"


@needs_make
def test_the_readme_check_holds_under_the_documented_seed_replay(monkeypatch):
    # Regression (issue 27): under `make test PYTEST_ARGS="--randomly-seed=N"` the outer make hands
    # the seed down (MAKEFLAGS and the environment), and the dry run above printed it as a command.
    monkeypatch.setenv("MAKEFLAGS", " -- PYTEST_ARGS=--randomly-seed=12345")
    monkeypatch.setenv("MAKELEVEL", "1")
    monkeypatch.setenv("PYTEST_ARGS", "--randomly-seed=12345")
    test_make_test_runs_the_commands_the_readme_lists()


def test_ci_runs_make_test_and_nothing_else():
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1] == "make test"
    assert all(c.startswith(("set ", "cd ")) for c in commands[:-1]), commands


@needs_make
def test_a_run_that_collects_no_tests_fails_loudly():
    result = run_make("suite", "TEST_STAMP=", f"PY={sys.executable}",
                  "PYTEST_ARGS=tests/unit/test_sizes.py -k no_test_has_this_name -p no:cacheprovider")
    assert result.returncode != 0
    assert "collected no tests" in result.stdout, result.stdout[-2000:]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"README.md:{s.line}" for s in SNIPPETS])
def test_readme_snippet_runs_on_the_host_backend(snippet, tmp_path):
    if snippet.not_run is not None:
        assert snippet.not_run, f"README.md:{snippet.line}: a snippet marked 'not run on CI' must say why"
        pytest.skip(f"README.md:{snippet.line} ({snippet.section}): {snippet.not_run}")
    # A fresh interpreter in an empty folder: a snippet cannot lean on this process's state.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUPYGRAPH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", snippet.code], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, (
        f"README.md:{snippet.line} ({snippet.section}) fails on the host backend; fix it, or mark it with "
        f"'<!-- not run on CI: why -->' on the line above its fence:\n{result.stderr[-3000:]}"
    )


def test_the_quick_start_has_a_gpu_and_a_cpu_variant_and_ci_runs_the_cpu_one():
    assert re.search(r"\bcupy\b", readme_quickstart.quickstart(gpu=True).code)
    cpu = readme_quickstart.quickstart(gpu=False)
    assert cpu.not_run is None and not re.search(r"\bcupy\b", cpu.code)


def test_every_marker_sits_on_a_python_snippet():
    # A marker whose snippet moved away would silently stop marking anything.
    lines = README.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if readme_quickstart.NOT_RUN.match(line.strip()):
            assert number < len(lines) and lines[number].strip() == "```python", f"README.md:{number}"


def test_the_readme_states_the_default_capture_sizes():
    match = re.search(r"`\[1, 2, 4\] \+ range\((\d+), (\d+), (\d+)\) \+ range\((\d+), (\d+), (\d+)\)`: (\d+) sizes",
                      README.read_text(encoding="utf-8"))
    assert match is not None, "README.md must state the default capture sizes as vLLM's formula"
    a, b, c, d, e, f, count = map(int, match.groups())
    stated = [1, 2, 4, *range(a, b, c), *range(d, e, f)]
    assert tuple(stated) == cg.CUDAGraphConfig().cudagraph_capture_sizes
    assert count == len(stated)


def test_every_reliability_promise_names_tests_that_exist():
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    promises = re.findall(r"^\d\. \*\*(.+?)\*\*(.*?)(?=^\d\. \*\*|^## )", text, re.S | re.M)
    assert len(promises) == 8 and all("*Tests:*" in body for _, body in promises), [p[0] for p in promises]
    tests = ROOT / "tests"
    defined = {m for path in tests.rglob("test_*.py") for m in re.findall(r"^def (test_\w+)\(",
                                                                          path.read_text(encoding="utf-8"), re.M)}
    for cited in re.findall(r"`([\w/]+\.py)(?:::(test_\w+))?`", text):
        path = ROOT / cited[0] if cited[0].startswith("tests/") else tests / "reliability" / cited[0]
        if not path.name.startswith("test_"):
            continue  # a source file (cupygraph/cache/checks/freshness.py), not a test
        assert path.is_file(), f"RELIABILITY.md cites {cited[0]}, which does not exist"
        if cited[1]:
            assert re.search(rf"^def {cited[1]}\(", path.read_text(encoding="utf-8"), re.M), "::".join(cited)
    for name in re.findall(r"`(test_\w+)`", text):
        assert name in defined, f"RELIABILITY.md cites {name}, which no test file defines"


def test_the_readme_states_the_control_flow_speedups_the_results_table_shows():
    # Regression (issue 27): the README said 2.7–2.9× where RESULTS.md shows 2.44–2.92× over four grids.
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    table = re.search(r"^### control flow: CG to tolerance.*?\n\n(\|.*?)(?:\n\n|\Z)", results, re.S | re.M)
    assert table is not None, "RESULTS.md has no control-flow table"
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.group(1).splitlines()[2:]]
    readme = " ".join(README.read_text(encoding="utf-8").split())  # wherever the lines break
    for column in (-2, -1):  # (b) graphed body with a host check ÷ while, (c) jax.lax.while_loop ÷ while
        ratios = [float(row[column].rstrip("×")) for row in rows]
        stated = f"{min(ratios):.2f}–{max(ratios):.2f}×"
        assert stated in readme, f"README.md must give the range RESULTS.md shows: {stated}"
    per_grid = ", ".join(f"{row[-2]} at {row[0]}" for row in rows)
    assert per_grid in readme, per_grid
