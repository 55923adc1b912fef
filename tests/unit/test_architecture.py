"""The package's shape (issues 12 and 28): no import cycles, imports go down the layers, no module
takes another's private names, small modules, and every subpackage says what it owns.

The import graph comes from ``tools/import_graph.py``: every import statement (lazy ones and
``if TYPE_CHECKING:`` ones too) and every module loaded by name (``importlib.import_module``,
``__import__``). Each check runs on the graph, edges or files given to it, so the tests below also
show it can fail, on a small made-up package where the real one has nothing to find.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from repo_files import load_tool

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
    "cupygraph.control_flow": 4, "cupygraph.linalg": 4, "cupygraph.random": 4, "cupygraph.routes": 4,
    "cupygraph.cache": 5,
    "cupygraph.compat": 6,
    "cupygraph.diagnostics": 7,
    "cupygraph.api": 8,
    "cupygraph.testing": 9, "cupygraph.distributed": 9,
    "cupygraph.cli": 10, "cupygraph.script": 10, "cupygraph.demo": 10, "cupygraph.__main__": 10,
    "cupygraph": 10,
}
LAYER_NAMES = ["foundation", "config", "dispatch", "backends", "control_flow/linalg/random/routes", "cache",
               "compat", "diagnostics", "api", "testing/distributed", "front doors"]



TOOL = load_tool("import_graph")


def layer_of(module: str) -> int:
    """The layer of ``module``: that of the longest prefix in ``LAYERS``."""
    name = module
    while name:
        if name in LAYERS:
            return LAYERS[name]
        name = name.rpartition(".")[0]
    raise KeyError(f"{module} is in no layer: add its subpackage to LAYERS in tests/unit/test_architecture.py")


def upward_imports(edges: Iterable[Any]) -> list[str]:
    """Each import (``tools/import_graph.Edge``) of a higher layer: where it is and how it imports."""
    found = []
    for edge in sorted(edges, key=lambda e: (str(e.path), e.line, e.target)):
        mine, theirs = layer_of(edge.source), layer_of(edge.target)
        if theirs > mine:
            how = "" if edge.kind == TOOL.STATEMENT else f" ({edge.kind})"
            found.append(f"{edge.path}:{edge.line}: {edge.source} (layer {mine}, {LAYER_NAMES[mine]}) imports "
                         f"{edge.target} (layer {theirs}, {LAYER_NAMES[theirs]}){how}")
    return found


def private_imports(edges: Iterable[Any]) -> list[str]:
    """Each private name (a leading underscore) a cupygraph module takes from another: imported
    (``from .x import _y``), read off an imported module (``x._y``), or a private module imported
    from outside the package that holds it. A package's own modules may import its private
    submodules (``linalg/__init__`` imports ``linalg._cusolver``). Other libraries' private names
    are theirs to name, not ours to rename: the graph holds cupygraph's modules only."""
    found = []
    for edge in sorted(edges, key=lambda e: (str(e.path), e.line, e.target, e.names)):
        parts = edge.target.split(".")
        for i, part in enumerate(parts):
            owner = ".".join(parts[:i])
            if TOOL.is_private(part) and edge.source != owner and not edge.source.startswith(owner + "."):
                found.append(f"{edge.path}:{edge.line}: {edge.source} imports {edge.target}, a module private to "
                             f"{owner}: make it public under a good name, or move what it needs into {owner}")
                break
        for name in edge.names:
            if TOOL.is_private(name):
                found.append(f"{edge.path}:{edge.line}: {edge.source} takes {name} from {edge.target} ({edge.kind}): "
                             "a private name of another module; make it public under a good name, or move the "
                             "code that needs it to its owner")
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


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A made-up package ``cupygraph`` under ``root``; ``files``: path in the package -> source."""
    package = root / "cupygraph"
    for relative, source in {"__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(package).parents:
            (package / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return package


# -- no import cycles ------------------------------------------------------------------------------

def test_no_import_cycles() -> None:
    found = TOOL.cycles(TOOL.import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_cycle_is_found() -> None:
    graph = {"cupygraph.a": {"cupygraph.b"}, "cupygraph.b": {"cupygraph.a"}, "cupygraph.c": set()}
    assert TOOL.cycles(graph) == [["cupygraph.a", "cupygraph.b"]]


def test_a_cycle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "a.py": "from .b import B\n",
        "b.py": """
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from .a import A
            else:
                from .c import A
            """,
        "c.py": "",
    })
    found = [(e.target, e.kind, e.line) for e in TOOL.edges(package) if e.source == "cupygraph.b"]
    assert sorted(found) == [("cupygraph.a", TOOL.TYPE_ONLY, 5), ("cupygraph.c", TOOL.STATEMENT, 7)]
    assert TOOL.cycles(TOOL.import_graph(package)) == [["cupygraph.a", "cupygraph.b"]]


def test_modules_loaded_by_name_are_edges(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "a.py": """
            import importlib

            def load(kind):
                importlib.import_module(".b", __package__)
                importlib.import_module("cupygraph.c")
                importlib.import_module(f".pkg.{kind}", package="cupygraph")
                __import__("d", globals(), None, [], 1)
                importlib.import_module(f"numpy.{kind}")  # another library's: no edge
            """,
        "b.py": "from . import a\n",
        "c.py": "",
        "d.py": "",
        "pkg/x.py": "",
        "pkg/y.py": "",
    })
    found = [(e.target, e.kind, e.line) for e in TOOL.edges(package) if e.source == "cupygraph.a"]
    assert sorted(found) == [("cupygraph.b", TOOL.BY_NAME, 5), ("cupygraph.c", TOOL.BY_NAME, 6),
                             ("cupygraph.d", TOOL.BY_NAME, 8), ("cupygraph.pkg.x", TOOL.BY_NAME, 7),
                             ("cupygraph.pkg.y", TOOL.BY_NAME, 7)]
    assert TOOL.cycles(TOOL.import_graph(package)) == [["cupygraph.a", "cupygraph.b"]]
    scan = TOOL.scan(package)
    assert scan.unresolved == []
    assert scan.libraries == [TOOL.LibraryLoad("numpy", Path("cupygraph/a.py"), 9)]  # test_packaging reads these


def test_no_module_is_loaded_by_a_name_the_graph_cannot_read() -> None:
    found = [f"{load.path}:{load.line}: {load.call}" for load in TOOL.unresolved_loads()]
    assert not found, ("modules loaded by a name the import graph cannot read (write the name, or an f-string "
                       "of it, so cycles and layers see the import):\n  " + "\n  ".join(found))


def test_a_load_by_an_unreadable_name_is_named(tmp_path: Path) -> None:
    package = write_package(tmp_path, {"a.py": """
        import importlib

        def load(name, where):
            return importlib.import_module(name), importlib.import_module(".b", where)
        """})
    found = sorted((load.path, load.line, load.call) for load in TOOL.unresolved_loads(package))
    assert found == [(Path("cupygraph/a.py"), 5, "importlib.import_module('.b', where)"),
                     (Path("cupygraph/a.py"), 5, "importlib.import_module(name)")]


# -- imports go down the layers --------------------------------------------------------------------

def test_every_module_has_a_layer() -> None:
    for module in TOOL.import_graph():
        layer_of(module)  # raises, naming the module, when it has none


def test_imports_go_down_the_layers() -> None:
    found = upward_imports(TOOL.edges())
    assert not found, "imports that go up a layer:\n  " + "\n  ".join(found)


def test_an_upward_import_is_named() -> None:
    path = Path("cupygraph/dispatch/dispatcher.py")
    edge = TOOL.Edge("cupygraph.dispatch.dispatcher", "cupygraph.cache.registry", path, 12, TOOL.STATEMENT)
    assert upward_imports([edge]) == [
        f"{path}:12: cupygraph.dispatch.dispatcher (layer 2, dispatch) imports cupygraph.cache.registry "
        "(layer 5, cache)"
    ]


def test_type_checking_and_by_name_imports_that_go_up_a_layer_are_named(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "dispatch/policy.py": """
            import importlib
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from ..cache.store import GraphStore

            def store():
                return importlib.import_module("cupygraph.cache.store")
            """,
        "cache/store.py": "from ..dispatch import policy\n",
    })
    path = Path("cupygraph/dispatch/policy.py")
    upward = "cupygraph.dispatch.policy (layer 2, dispatch) imports cupygraph.cache.store (layer 5, cache)"
    assert upward_imports(TOOL.edges(package)) == [f"{path}:6: {upward} (type-only import)",
                                                   f"{path}:9: {upward} (load by name)"]


# -- private names stay in their module ------------------------------------------------------------

def test_no_module_takes_another_modules_private_names() -> None:
    found = private_imports(TOOL.edges())
    assert not found, "private names taken from another module:\n  " + "\n  ".join(found)


def test_a_private_name_taken_from_another_module_is_named(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "guard.py": "def _refuse(): ...\n__version__ = '1'\n",
        "a.py": "from .guard import _refuse, __version__\n",
        "b.py": "from . import guard\n\nguard._refuse()\n",
        "pkg/_inner.py": "public = 1\n",
        "pkg/user.py": "from . import _inner\nfrom ._inner import public\n",
        "c.py": "from .pkg import _inner\nimport cupygraph.pkg._inner\n",
    })
    a, b, c = (Path(f"cupygraph/{name}.py") for name in "abc")
    private_module = ("a module private to cupygraph.pkg: make it public under a good name, or move what it "
                      "needs into cupygraph.pkg")
    assert [line.split(": a private name")[0] for line in private_imports(TOOL.edges(package))
            ] == [
        f"{a}:1: cupygraph.a takes _refuse from cupygraph.guard (import)",
        f"{b}:3: cupygraph.b takes _refuse from cupygraph.guard (private read)",
        f"{c}:1: cupygraph.c imports cupygraph.pkg._inner, {private_module}",
        f"{c}:2: cupygraph.c imports cupygraph.pkg._inner, {private_module}",
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


# -- the architecture page names what exists -------------------------------------------------------

def stale_file_names(text: str, root: Path) -> list[str]:
    """Each file or folder ``text`` names in backticks (``cache/entry.py``, ``entry.py``,
    ``fastpath/``) that no path under ``root`` ends with: a name a redesign left behind."""
    paths = {p.relative_to(root).as_posix() for p in root.rglob("*")
             if ".git" not in p.parts and ".venv" not in p.parts}
    named = re.findall(r"`([\w./]+\.(?:py|pyi|c|h|cu|cuh)|[\w./]+/)`", text)
    found = []
    for name in sorted(set(named)):
        bare = name.rstrip("/")
        if not any(p == bare or p.endswith("/" + bare) for p in paths):
            found.append(f"docs/ARCHITECTURE.md names `{name}`, which no file or folder is")
    return found


def test_the_architecture_page_names_only_what_exists() -> None:
    found = stale_file_names((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"), ROOT)
    assert not found, "\n".join(found)


def test_a_stale_name_on_the_architecture_page_is_named(tmp_path: Path) -> None:
    (tmp_path / "cupygraph" / "cache").mkdir(parents=True)
    (tmp_path / "cupygraph" / "cache" / "entry.py").write_text("", encoding="utf-8")
    text = "`cache/entry.py` and `entry.py` and `cache/` hold; `cache/capture.py` and `plans/` left"
    assert stale_file_names(text, tmp_path) == [
        "docs/ARCHITECTURE.md names `cache/capture.py`, which no file or folder is",
        "docs/ARCHITECTURE.md names `plans/`, which no file or folder is",
    ]


def test_every_test_module_has_its_own_name():
    """Pytest imports test files by basename (the test folders are not packages): two files of one
    name collect on a CPU, where the GPU one skips at import, and fail on a GPU machine."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)} share a name"
        seen[path.name] = path
