"""Load the repository's example scripts and tools by path (they are not packages on sys.path), and
read what README.md states for tests to check.

Shared by the unit, GPU and reliability tests: each load executes the file as a fresh module, so
a test sees the file as a user running it would.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a fresh module."""
    return load_file(ROOT / "examples" / f"{name}.py", f"example_{name}")


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a fresh module."""
    return load_file(ROOT / "tools" / f"{name}.py", f"tool_{name}")


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
