"""The import graph of the cupygraph package: cycles and layering, for tests and for reading.

Counts every import of a cupygraph module, wherever the interpreter or the type checker follows it:

* ``import`` and ``from ... import`` statements, at module level and inside functions alike (a lazy
  import is still a dependency);
* imports under ``if TYPE_CHECKING:``: only the type checker runs them, yet a cycle or an upward
  import through one is the same knot in the design;
* modules loaded by name, ``importlib.import_module(name, package)`` and ``__import__(name, ...,
  level)``, relative names included. An f-string name is an edge to every module it can spell.
  A name the scan cannot read (a variable) is listed as unresolved: the graph cannot see where it
  points. Other libraries' modules loaded by name are listed too (the packaging test reads them);
* reads of a private name on an imported module (``from . import x`` then ``x._y``), as edges of
  their own kind: the import is already an edge, these say which private name crosses it.

Every edge keeps its kind and line, so a check can say where an import is. Every function takes the
package folder, so the checks run on a small made-up package as well as on cupygraph.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

PACKAGE = Path(__file__).resolve().parents[1] / "cupygraph"

STATEMENT, TYPE_ONLY, BY_NAME, PRIVATE_READ = "import", "type-only import", "load by name", "private read"


@dataclass(frozen=True)
class Edge:
    """``source`` imports the module ``target`` at ``path:line`` (``path`` from the package's parent
    folder, as ``cupygraph/api/jit.py``). ``names``: what ``from target import ...`` takes from the
    module (not a submodule, which is the target itself), or the private name a read takes."""

    source: str
    target: str
    path: Path
    line: int
    kind: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnresolvedLoad:
    """A module loaded by a name the scan cannot read."""

    path: Path
    line: int
    call: str


@dataclass(frozen=True)
class LibraryLoad:
    """A module of another library loaded by name (``library``: its top-level package)."""

    library: str
    path: Path
    line: int


@dataclass
class ImportScan:
    """What ``scan`` found in a package."""

    edges: list[Edge] = field(default_factory=list)
    unresolved: list[UnresolvedLoad] = field(default_factory=list)
    """Loads by a name the scan cannot read: the graph cannot see where they point."""
    libraries: list[LibraryLoad] = field(default_factory=list)
    """Other libraries' modules loaded by name (a plain import scan does not see them)."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> its file, for every module under ``package``."""
    found = {module_name(p, package): p for p in package.rglob("*.py")}
    # A compiled extension is a module too (its stub names it); it imports nothing of ours.
    found.update({module_name(p, package): p for p in package.rglob("*.pyi") if module_name(p, package) not in found})
    return found


def _anchor(package: str, dots: int) -> str:
    """The package a name with ``dots`` leading dots is taken from, ``package`` being ``__package__``."""
    parts = package.split(".")
    return ".".join(parts[: len(parts) - (dots - 1)])


def _within(name: str, known: dict[str, Path]) -> str:
    """The module ``name`` lands in: itself, or the nearest parent that is a module (a class or
    function imported from a module is an edge to that module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def _type_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` (its body; an ``else`` runs)."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for statement in node.body for inner in ast.walk(statement)}


def is_private(name: str) -> bool:
    """A leading underscore, not a dunder (``_refuse``, not ``__version__``)."""
    return name.startswith("_") and not name.startswith("__")


def _load_call(node: ast.AST) -> Optional[ast.Call]:
    """``node`` when it calls ``import_module`` (``importlib.`` or not) or ``__import__``."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return node if name in ("import_module", "__import__") else None


def _argument(call: ast.Call, position: int, keyword: str) -> Optional[ast.expr]:
    if len(call.args) > position:
        return call.args[position]
    return next((kw.value for kw in call.keywords if kw.arg == keyword), None)


def _spelled(node: ast.expr) -> Optional[list[Union[str, None]]]:
    """The name as literal pieces, None standing for an f-string field; None when not readable."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None for v in node.values]
    return None


def _load_pattern(call: ast.Call, own_package: str, current: str) -> Optional[tuple[str, str]]:
    """(a regular expression for the full module names a load by name can reach, the top-level
    package its name spells, "" when a field starts it); None when the name, or the package a
    relative name needs, cannot be read."""
    pieces = _spelled(call.args[0])
    if pieces is None:
        return None
    first = pieces[0] or ""
    if isinstance(call.func, ast.Name) and call.func.id == "__import__":
        level_node = _argument(call, 4, "level")
        dots = level_node.value if isinstance(level_node, ast.Constant) and isinstance(level_node.value, int) else 0
        package: Optional[str] = own_package
    else:
        dots = len(first) - len(first.lstrip("."))
        given = _argument(call, 1, "package")
        package = (own_package if isinstance(given, ast.Name) and given.id == "__package__"
                   else current if isinstance(given, ast.Name) and given.id == "__name__"
                   else given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None)
        pieces = [first[dots:], *pieces[1:]]
    pattern = "".join(re.escape(p) if p is not None else r"[\w.]+" for p in pieces)
    if not dots:
        top = first.split(".")[0] if pieces[0] and (len(pieces) == 1 or "." in first) else ""
        return pattern, top
    if package is None:
        return None
    return re.escape(_anchor(package, dots)) + (r"\." + pattern if pattern else ""), package.split(".")[0]


def _scan_module(name: str, path: Path, known: dict[str, Path], package: Path, found: ImportScan) -> None:
    root, shown = package.name, path.relative_to(package.parent)
    is_package = path.name == "__init__.py"
    own_package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = _type_only(tree)
    edges, unresolved, libraries = found.edges, found.unresolved, found.libraries

    def add(target: str, node: ast.AST, kind: str, names: tuple[str, ...] = ()) -> None:
        target = _within(target, known)
        if target.split(".")[0] == root and target != name:
            kind = TYPE_ONLY if kind == STATEMENT and id(node) in type_only else kind
            edges.append(Edge(name, target, shown, getattr(node, "lineno", 0), kind, names))

    bound: dict[str, str] = {}  # local name -> the module it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, STATEMENT)
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _anchor(own_package, node.level) + (f".{node.module}" if node.module else "")
            for alias in node.names:
                # ``from pkg import submodule`` is an edge to the submodule, which takes no name from it.
                submodule = f"{base}.{alias.name}"
                if submodule in known:
                    add(submodule, node, STATEMENT)
                    bound[alias.asname or alias.name] = submodule
                else:
                    add(base, node, STATEMENT, (alias.name,))
        elif (call := _load_call(node)) is not None:
            spelled = _load_pattern(call, own_package, name)
            if spelled is None:
                unresolved.append(UnresolvedLoad(shown, call.lineno, ast.unparse(call)))
                continue
            pattern, top = spelled
            if top and top != root:
                libraries.append(LibraryLoad(top, shown, call.lineno))
            for target in sorted({_within(m, known) for m in known if re.fullmatch(pattern, m)} - {""}):
                add(target, call, BY_NAME)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and is_private(node.attr)):
            add(bound[node.value.id], node, PRIVATE_READ, (node.attr,))


def scan(package: Path = PACKAGE) -> ImportScan:
    """Every import edge between modules of ``package``, the loads by a name it cannot read, and the
    other libraries' modules loaded by name."""
    known = modules(package)
    found = ImportScan()
    for name, path in sorted(known.items()):
        if path.suffix == ".py":
            _scan_module(name, path, known, package, found)
    return found


def edges(package: Path = PACKAGE) -> list[Edge]:
    return scan(package).edges


def unresolved_loads(package: Path = PACKAGE) -> list[UnresolvedLoad]:
    return scan(package).unresolved


def graph_of(names: Iterable[str], found: Iterable[Edge]) -> dict[str, set[str]]:
    """Module -> the modules it imports, for the modules ``names`` and the edges ``found``."""
    graph: dict[str, set[str]] = {name: set() for name in names}
    for edge in found:
        graph[edge.source].add(edge.target)
    return graph


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, by any of the forms above."""
    return graph_of(modules(package), edges(package))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _report(package: Path) -> Iterator[str]:
    found = scan(package)
    for component in cycles(graph_of(modules(package), found.edges)):
        yield "cycle: " + " <-> ".join(component)
    for load in found.unresolved:
        yield f"unresolved load: {load.path}:{load.line}: {load.call}"


if __name__ == "__main__":
    for line in _report(PACKAGE):
        print(line)
