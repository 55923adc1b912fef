"""The package's shape (issue 12): no import cycles, imports go down the layers, small modules,
and every subpackage says what it owns.

The import graph comes from ``tools/import_graph.py`` (type-only imports left out). Each check
runs on a graph or file list given to it, so the tests below also show it can fail.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cupygraph"
MAX_LINES = 400

# Low to high: a module may import its own layer or a lower one, never a higher one.
LAYERS: dict[str, int] = {
    "cupygraph.errors": 0, "cupygraph.reasons": 0, "cupygraph.pytree": 0, "cupygraph.frames": 0,
    "cupygraph.hints": 0, "cupygraph.logs": 0,
    "cupygraph.config": 1,
    "cupygraph.dispatch": 2,
    "cupygraph.backends": 3, "cupygraph.kernels": 3,
    "cupygraph.control_flow": 4, "cupygraph.linalg": 4, "cupygraph.random": 4,
    "cupygraph.cache": 5,
    "cupygraph.compat": 6,
    "cupygraph.diagnostics": 7,
    "cupygraph.api": 8,
    "cupygraph.testing": 9, "cupygraph.distributed": 9,
    "cupygraph.cli": 10, "cupygraph.script": 10, "cupygraph.demo": 10, "cupygraph.__main__": 10,
    "cupygraph": 10,
}
LAYER_NAMES = ["foundation", "config", "dispatch", "backends", "control_flow/linalg/random", "cache",
               "compat", "diagnostics", "api", "testing/distributed", "front doors"]


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cupygraph_import_graph", ROOT / "tools" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(spec.name, None)
    spec.loader.exec_module(module)
    return module


TOOL = _load_tool()


def layer_of(module: str) -> int:
    """The layer of ``module``: that of the longest prefix in ``LAYERS``."""
    name = module
    while name:
        if name in LAYERS:
            return LAYERS[name]
        name = name.rpartition(".")[0]
    raise KeyError(f"{module} is in no layer: add its subpackage to LAYERS in tests/unit/test_architecture.py")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = layer_of(module), layer_of(target)
            if theirs > mine:
                found.append(f"{module} (layer {mine}, {LAYER_NAMES[mine]}) imports {target} "
                             f"(layer {theirs}, {LAYER_NAMES[theirs]})")
    return found


def long_modules(paths: list[Path]) -> list[str]:
    found = []
    for path in sorted(paths):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_LINES}; split it by concern)")
    return found


def undocumented_packages(inits: list[Path]) -> list[str]:
    found = []
    for init in sorted(inits):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        if not docstring or "import" not in docstring:
            found.append(f"{init.relative_to(ROOT)}: needs a docstring saying what the layer owns "
                         "and what it may import")
    return found


def _subpackage_inits() -> list[Path]:
    return [p for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "kernels"]


# -- no import cycles ------------------------------------------------------------------------------

def test_no_import_cycles() -> None:
    found = TOOL.cycles(TOOL.import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_cycle_is_found() -> None:
    graph = {"cupygraph.a": {"cupygraph.b"}, "cupygraph.b": {"cupygraph.a"}, "cupygraph.c": set()}
    assert TOOL.cycles(graph) == [["cupygraph.a", "cupygraph.b"]]


# -- imports go down the layers --------------------------------------------------------------------

def test_every_module_has_a_layer() -> None:
    for module in TOOL.import_graph():
        layer_of(module)  # raises, naming the module, when it has none


def test_imports_go_down_the_layers() -> None:
    found = upward_imports(TOOL.import_graph())
    assert not found, "imports that go up a layer:\n  " + "\n  ".join(found)


def test_an_upward_import_is_named() -> None:
    graph = TOOL.import_graph()
    graph["cupygraph.dispatch.dispatcher"] = graph["cupygraph.dispatch.dispatcher"] | {"cupygraph.cache.registry"}
    assert upward_imports(graph) == [
        "cupygraph.dispatch.dispatcher (layer 2, dispatch) imports cupygraph.cache.registry (layer 5, cache)"
    ]


# -- module size -----------------------------------------------------------------------------------

def test_no_module_over_the_limit() -> None:
    found = long_modules(list(PACKAGE.rglob("*.py")))
    assert not found, "modules over the limit:\n  " + "\n  ".join(found)


def test_a_long_module_is_named(tmp_path: Path) -> None:
    long_file = ROOT / "cupygraph" / "dispatch" / "dispatcher.py"
    limit = len(long_file.read_text(encoding="utf-8").splitlines())
    global MAX_LINES
    saved, MAX_LINES = MAX_LINES, limit - 1
    try:
        assert long_modules([long_file]) == [
            f"cupygraph/dispatch/dispatcher.py: {limit} lines (at most {limit - 1}; split it by concern)"
        ]
    finally:
        MAX_LINES = saved


# -- every layer says what it owns -----------------------------------------------------------------

def test_every_subpackage_says_what_it_owns() -> None:
    inits = _subpackage_inits()
    assert {p.parent.name for p in inits} >= {"config", "dispatch", "cache", "backends", "control_flow", "api",
                                              "diagnostics", "compat", "testing"}
    found = undocumented_packages(inits)
    assert not found, "\n".join(found)


def test_a_missing_docstring_is_named(tmp_path: Path) -> None:
    package = tmp_path / "cupygraph" / "empty"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from __future__ import annotations\n", encoding="utf-8")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert undocumented_packages([package / "__init__.py"]) == [
            "cupygraph/empty/__init__.py: needs a docstring saying what the layer owns and what it may import"
        ]
    finally:
        ROOT = saved
