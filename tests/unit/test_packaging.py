"""What the package and its tests import is what setup.cfg declares, and `make` installs only that."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo_files import load_tool, needs_make, run_make

ROOT = Path(__file__).resolve().parents[2]
# Import name -> distribution name, where the two differ.
DISTRIBUTION = {"yaml": "pyyaml", "tomli_w": "tomli-w", "cuda": "cuda-bindings", "nvmath": "nvmath-python"}
# Imported only on a GPU machine (the GPU tests and benchmarks), each behind an importorskip or a
# lazy import that says what is missing; `make` installs CuPy there.
# dask and dask_cuda: only examples/dask_cuda_pipeline.py's main() imports them (a multi-GPU example).
# nvmath: the GPU extras' nvmath-python (tests/extras.py skips naming the extra without it).
GPU_ONLY = {"cupy", "cupyx", "cupy_backends", "torch", "jax", "jaxlib", "dask", "dask_cuda", "nvmath"}

def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    return parser


def requirement_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if match:
            names.add(match.group(1).lower().replace("_", "-"))
    return names


def declared(*extras: str) -> set[str]:
    cfg = setup_cfg()
    names = requirement_names(cfg["options"]["install_requires"])
    for extra in extras:
        names |= requirement_names(cfg["options.extras_require"][extra])
    return names


def local_names() -> set[str]:
    names = {"cupygraph", "tools", "tests", "examples", "conftest"}
    for folder in ("tests", "tools", "examples"):
        names |= {p.stem for p in (ROOT / folder).rglob("*.py")}
    return names


def imported_modules(folder: str) -> Iterator[tuple[str, str]]:
    """(top-level module, file:line) for every absolute import and importorskip under ``folder``."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name.split(".")[0], where
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield node.module.split(".")[0], where
            elif (isinstance(node, ast.Call) and node.args
                  and (getattr(node.func, "attr", None) == "importorskip"  # pytest.importorskip("m")
                       or getattr(node.func, "id", None) == "need")  # tests/extras.py's need("m", extra)
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                yield node.args[0].value.split(".")[0], where


def undeclared(folders: tuple[str, ...], available: set[str], also_allowed: set[str]) -> list[str]:
    local = local_names()
    missing = []
    for folder in folders:
        for module, where in imported_modules(folder):
            if module in sys.stdlib_module_names or module in local or module in also_allowed:
                continue
            if DISTRIBUTION.get(module, module).lower().replace("_", "-") not in available:
                missing.append(f"{module} ({where})")
    return missing


def test_every_module_the_tests_import_is_declared():
    # tools/ and examples/ count: the tests run both. The nvtx tests skip without the nvtx extra.
    missing = undeclared(("tests", "tools", "examples"), declared("test", "cuda", "lint", "nvtx"), GPU_ONLY)
    assert not missing, f"imported but not declared in setup.cfg (install_requires or the test extras): {missing}"


def test_every_module_the_package_imports_is_a_dependency():
    # The pytest plugin module runs inside pytest; CUDA modules are imported lazily on the GPU path;
    # nvtx is the optional extra of the same name, imported only when ranges are asked for;
    # mpi4py lazily by cupygraph.distributed, from its extra.
    assert "nvtx" in requirement_names(setup_cfg()["options.extras_require"]["nvtx"])
    missing = undeclared(("cupygraph",), declared("distributed"), GPU_ONLY | {"pytest", "cuda", "nvtx"})
    assert not missing, f"cupygraph imports modules that install_requires lacks: {missing}"


def dry_run(target: str, *variables: str) -> str:
    """What ``make TARGET`` would run from scratch (``-B``), without running it."""
    dry = run_make("-n", "-B", target, *variables)
    assert dry.returncode == 0, dry.stderr
    return dry.stdout


def installed_extras(target: str, *variables: str) -> list[str]:
    return re.findall(r'pip install -q -e "\.(.*)"', dry_run(target, *variables))


def test_the_cuda_wheels_are_only_in_the_cuda_extra_and_only_where_nvidia_ships_them():
    extras = setup_cfg()["options.extras_require"]
    for name in ("test", "lint"):
        cuda_only = [n for n in requirement_names(extras[name]) if n.startswith(("cuda-", "nvidia-", "cupy"))]
        assert not cuda_only, f"the {name} extra must install on macOS too: {cuda_only}"
    for line in filter(None, (line.strip() for line in extras["cuda"].splitlines())):
        marker = line.partition(";")[2].strip()
        assert marker == 'sys_platform == "linux" or sys_platform == "win32"', line


@needs_make
@pytest.mark.parametrize(("cuda_major", "demo", "test"), [
    ("", "", "[test,lint,cuda]"),
    ("12", "[cuda12]", "[test,lint,cuda,cuda12]"),
    ("13", "[cuda13]", "[test,lint,cuda,cuda13]"),
])
def test_make_installs_only_what_each_entry_point_needs(cuda_major, demo, test):
    # CUDA_MAJOR stands for what nvidia-smi reports ("" where there is no GPU driver).
    assert installed_extras("demo", f"CUDA_MAJOR={cuda_major}") == [demo]
    assert installed_extras("test", f"CUDA_MAJOR={cuda_major}") == [test]


@needs_make
def test_the_venv_does_not_see_system_site_packages():
    dry = dry_run("test")
    commands = [part for line in dry.splitlines() for part in re.split(r"&&|\|\||;", line)]
    creates = [cmd.strip(" {}") for cmd in commands if " -m venv " in cmd]
    assert creates, dry
    assert not any("--system-site-packages" in cmd for cmd in creates), creates


def imports_guarded_by_import_error(folder: str) -> Iterator[tuple[str, str]]:
    """Modules imported inside ``try: ... except ImportError`` (a fallback for a missing package)."""
    catches = {"ImportError", "ModuleNotFoundError"}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Try):
                continue
            caught = set()
            for handler in node.handlers:
                types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                caught |= {t.id for t in types if isinstance(t, ast.Name)}
            if not caught & catches:
                continue
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if isinstance(inner, ast.Import):
                    names = [alias.name for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    names = [inner.module]
                else:
                    continue
                for name in names:
                    yield name.split(".")[0], f"{path.relative_to(ROOT)}:{inner.lineno}"


def test_hard_dependencies_are_not_treated_as_optional():
    # tqdm and tomli-w are install_requires: code that falls back without them hides a broken install.
    hard = declared()
    soft = [f"{module} ({where})" for module, where in imports_guarded_by_import_error("cupygraph")
            if DISTRIBUTION.get(module, module).lower().replace("_", "-") in hard]
    assert not soft, f"hard dependencies imported with a fallback: {soft}"


def test_the_license_file_is_the_apache_2_0_text_setup_cfg_names():
    metadata = setup_cfg()["metadata"]
    assert metadata["license"] == "Apache-2.0"
    assert metadata["license_files"].split() == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub


def test_what_the_gpu_path_imports_by_name_comes_with_every_gpu_extra():
    # cupygraph.linalg's cuSOLVER and cuSPARSE routes import nvmath-python by name on first use: a user's
    # `pip install cupygraph[cuda13]` (and `make test` on a GPU machine) must bring it (issue 27).
    found = [(load.library, f"{load.path}:{load.line}") for load in load_tool("import_graph").scan().libraries]
    assert "nvmath" in {module for module, _ in found}, found
    for extra in ("cuda12", "cuda13"):
        available = declared(extra)
        missing = [f"{module} ({where})" for module, where in found
                   if not module.startswith("cupy") and DISTRIBUTION.get(module, module) not in available]
        assert not missing, f"the {extra} extra lacks what the GPU path imports by name: {missing}"


def test_the_readme_lists_each_extra_as_setup_cfg_declares_it():
    # Regression (issue 27): the README's `test` extra lacked scipy, mpi4py and mpich.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Running the tests\n(.*?)(?=^## )", text, re.S | re.M)
    assert section is not None
    extras = setup_cfg()["options.extras_require"]
    listed = {name: items for name, items in re.findall(r"`([\w-]+)`\s+\(([^)]*)\)", section.group(1))
              if name in extras}
    assert {"test", "lint", "cuda", "cuda12", "cuda13"} <= set(listed), listed
    for name, items in listed.items():
        documented = {item.strip().lower() for item in items.split(",")}
        assert documented == requirement_names(extras[name]), f"README.md lists the {name} extra as {items!r}"
