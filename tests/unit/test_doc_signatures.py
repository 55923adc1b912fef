"""Every signature the docs show is the code's: names, order, positional-only and keyword-only markers,
defaults (``inspect.signature`` against the inline code spans of README.md, RELIABILITY.md and docs/).

A span such as `dist.init(mpi_comm=None, *, backend="auto", device=None)` is a signature when it reads
as a Python parameter list with literal defaults and names every parameter of a cupygraph callable;
a call example (`scalar(v, like=a)`, `f(x)`) is left alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"`((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(([^`]*)\)`")
# How the docs spell the modules: `dist.` is `import cupygraph.distributed as dist`.
ALIASES = {"dist": "cupygraph.distributed", "cg": "cupygraph"}
# Where a bare name (a method in a table of methods) is looked up.
BARE = ("cupygraph", "cupygraph.distributed", "cupygraph.linalg", "cupygraph.distributed:Communicator")


def _attribute(path: str) -> Optional[Any]:
    module_name, _, attributes = path.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in filter(None, attributes.split(".")):
        value = getattr(value, part, None)
    return value


def resolve(name: str) -> Optional[Callable[..., Any]]:
    head, _, rest = name.partition(".")
    if head in ALIASES:
        name = f"{ALIASES[head]}.{rest}" if rest else ALIASES[head]
    candidates = []
    if name.startswith("cupygraph."):
        parts = name.split(".")
        candidates = [".".join(parts[:i]) + ":" + ".".join(parts[i:]) for i in range(len(parts) - 1, 0, -1)]
    elif "." not in name:
        candidates = [f"{where}{'.' if ':' in where else ':'}{name}" for where in BARE]
    for candidate in candidates:
        found = _attribute(candidate)
        if callable(found):
            return found
    return None


def documented_parameters(text: str) -> Optional[list[tuple[str, Any, Any]]]:
    """(name, kind, default or inspect.Parameter.empty) per parameter, or None: not a parameter list
    with literal defaults (a call example)."""
    try:
        args = ast.parse(f"def _({text}): pass").body[0].args  # type: ignore[attr-defined]
    except SyntaxError:
        return None
    P = inspect.Parameter
    positional = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [(a, P.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults = [P.empty] * (len(positional) - len(args.defaults)) + list(args.defaults)
    rows = list(zip(positional, defaults)) + [((a, P.KEYWORD_ONLY), d if d is not None else P.empty)
                                              for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    params = []
    for (arg, kind), default in rows:
        if default is not P.empty:
            try:
                default = ast.literal_eval(default)
            except ValueError:
                return None
        params.append((arg.arg, kind, default))
    if args.vararg:
        params.append((args.vararg.arg, P.VAR_POSITIONAL, P.empty))
    if args.kwarg:
        params.append((args.kwarg.arg, P.VAR_KEYWORD, P.empty))
    return params


def actual_parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def _is_signature(fn: Callable[..., Any], documented: list[tuple[str, Any, Any]], text: str) -> bool:
    """Whether a parameter list is a signature of ``fn``: it names every parameter, or it names only
    parameters of ``fn`` and is written as a signature (a ``*`` or ``/`` marker, or a default), so a
    signature the code has outgrown is checked too. A call example names other things, or fewer
    parameters without markers or defaults."""
    try:
        actual = actual_parameters(fn)
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = {n for n, k, _ in documented if k not in variadic}
    have = {n for n, k, _ in actual if k not in variadic}
    written_as_signature = "*" in text or "/" in text or any(d is not inspect.Parameter.empty for *_, d in documented)
    return named == have or (bool(named) and named <= have and written_as_signature)


def signatures() -> list[tuple[str, str, str]]:
    """(where, name, parameter text) of every documented signature."""
    found = []
    for path in DOCS:
        content = path.read_text(encoding="utf-8")
        for match in SPAN.finditer(content):  # a span may wrap onto the next line
            name, text = match.group(1), " ".join(match.group(2).split())
            fn, documented = resolve(name), documented_parameters(text)
            if fn is not None and documented is not None and _is_signature(fn, documented, text):
                number = content.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{number}", name, text))
    return found


SIGNATURES = signatures()


def test_the_docs_show_signatures_to_check():
    names = {name for _, name, _ in SIGNATURES}
    assert {"dist.init", "cupygraph.linalg.gemm", "cupygraph.matmul", "all_reduce"} <= names, names


@pytest.mark.parametrize("where, name, text", SIGNATURES, ids=[f"{w} {n}" for w, n, _ in SIGNATURES])
def test_a_documented_signature_is_the_codes(where, name, text):
    # Regression (issue 27): docs/DISTRIBUTED.md showed dist.init without its keyword-only marker.
    fn = resolve(name)
    assert fn is not None
    documented, actual = documented_parameters(text), actual_parameters(fn)
    assert documented is not None
    shown = str(inspect.signature(fn)).split(" -> ")[0]
    assert [(n, k) for n, k, _ in documented] == [(n, k) for n, k, _ in actual], (
        f"{where}: `{name}({text})`, but the code has {name}{shown}")
    for (n, _, doc_default), (_, _, code_default) in zip(documented, actual):
        same = type(doc_default) is type(code_default) and doc_default == code_default  # 1 is not 1.0
        assert same, f"{where}: {n}={doc_default!r} in the docs, {code_default!r} in the code"


def test_a_signature_the_code_outgrew_is_still_checked():
    # Regression (review): a documented signature missing a parameter the code added was taken for a call
    # example and skipped; written as a signature (a marker or a default), it is checked and fails.
    def fn(a, b, *, c=1, d=2):
        return a, b, c, d

    outgrown = "a, b, *, c=1"
    assert _is_signature(fn, documented_parameters(outgrown), outgrown)
    assert not _is_signature(fn, documented_parameters("x, y"), "x, y")  # a call example: other names
    assert not _is_signature(fn, documented_parameters("a, b"), "a, b")  # fewer names, no marker: a call
