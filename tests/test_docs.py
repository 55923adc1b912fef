"""The docs must not drift from the code: the config reference, the setup and test commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed here")


def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"README.md has no '## {title}' section"
    return match.group(1)


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args],
                          capture_output=True, text=True)


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
    dry = make("-n", "test", "TEST_STAMP=")
    assert dry.returncode == 0, dry.stderr
    ran = [line.split(" || ")[0].strip() for line in dry.stdout.splitlines() if line.startswith(".venv/bin/python")]
    block = re.search(r"```bash\n(.*?)```", readme_section("Running the tests"), re.S)
    assert block is not None
    documented = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    assert ran == documented
    assert any(cmd.endswith("-m pytest -p randomly") for cmd in ran), "the suite must run in random order"


def test_ci_runs_make_test_and_nothing_else():
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1] == "make test"
    assert all(c.startswith(("set ", "cd ")) for c in commands[:-1]), commands


@needs_make
def test_a_run_that_collects_no_tests_fails_loudly():
    result = make("suite", "TEST_STAMP=", f"PY={sys.executable}",
                  "PYTEST_ARGS=tests/test_sizes.py -k no_test_has_this_name -p no:cacheprovider")
    assert result.returncode != 0
    assert "collected no tests" in result.stdout, result.stdout[-2000:]
