"""Load the repository's example scripts and tools by path (they are not packages on sys.path), and
read what README.md states for tests to check.

Shared by the unit, GPU and reliability tests: each load executes the file as a fresh module, so
a test sees the file as a user running it would.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: a dataclass in the file looks its module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)  # the process as it was: the caller holds the module
    return module


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a fresh module."""
    return load_file(ROOT / "examples" / f"{name}.py", f"example_{name}")


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a fresh module."""
    return load_file(ROOT / "tools" / f"{name}.py", f"tool_{name}")


def make_environment() -> dict[str, str]:
    """The environment for a ``make`` the tests run, without what an outer ``make`` passes down.

    Under ``make test PYTEST_ARGS=...`` the outer make hands its command-line variables to every
    child through ``MAKEFLAGS`` and the environment, so a child ``make -n test`` would print the
    replayed seed as part of the commands. The child must see the Makefile as a fresh shell does.
    """
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    from_environment = set(re.findall(r"^(\w+)\s*\?=", makefile, re.M))  # `?=`: an env var sets them
    passed_down = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GNUMAKEFLAGS"}
    return {k: v for k, v in os.environ.items() if k not in passed_down | from_environment}


def run_make(*args: str) -> subprocess.CompletedProcess[str]:
    """``make -C ROOT ARGS`` in ``make_environment()``, output captured."""
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args],
                          capture_output=True, text=True, env=make_environment())


def needs_make(test: Callable[..., Any]) -> Callable[..., Any]:
    """Skip ``test`` where GNU make is not installed (what ``run_make`` needs)."""
    import pytest

    return pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed here")(test)


def documented_runs(backend: str) -> dict[str, Callable[[int], int]]:
    """README.md's table of how many times a call runs the function ("What a call runs"): per row (its
    first cell), the count on ``backend`` ("host" or "GPU") as a function of ``num_warmups``."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- execution counts:"))
    header = [cell.strip() for cell in lines[start + 1].strip("|").split("|")]
    column = next(i for i, cell in enumerate(header) if cell.endswith(f"{backend} backend"))
    table: dict[str, Callable[[int], int]] = {}
    for line in lines[start + 3:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        terms = [term.strip().strip("`") for term in cells[column].split("+")]
        table[cells[0]] = lambda warmups, terms=terms: sum(warmups if t == "num_warmups" else int(t) for t in terms)
    return table
