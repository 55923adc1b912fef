"""Load the repository's example scripts and tools by path (they are not packages on sys.path).

Shared by the unit, GPU and reliability tests: each load executes the file as a fresh module, so
a test sees the file as a user running it would.
"""

from __future__ import annotations

import importlib.util
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
