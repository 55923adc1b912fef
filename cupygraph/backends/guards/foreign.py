"""Arrays a function reaches without taking them as arguments: found at capture, watched after.

The rule (a footgun of every CUDA graph): **arrays a graph reads or writes must be arguments of
the jitted function — batched, copied whole, or ``constant_argnums`` — or be kept alive, and bound
to the same name, by the caller for as long as the graph lives.** A graph replays raw device
addresses. An array reached through a closure, a global, a default argument or an attribute of
``self`` is recorded by address, not copied: once it is freed or its name rebound, every replay
reads garbage or writes into whatever took its memory (another array, a cuFFT work area), and
nothing looks wrong. cupygraph cannot own such an array (it would freeze the caller's data into
the graph), so it says so: a ``ForeignMemoryWarning`` at capture names the variable (on the GPU
only for arrays the graph's nodes actually touch, found by walking them), and under
``debug=True`` a replay after that array died or was rebound raises ``ForeignMemoryError``.
The NumPy host backend warns and raises likewise, for the arrays the function refers to.

Finding the variable is best effort and bounded: closure cells, globals the code names (also in
nested functions and helper functions it calls), default arguments, attributes of ``self`` (of a
bound method, or a jitted method's argument 0), of a callable object or of an object passed as a
static argument, and one or two levels into lists, tuples, dicts and plain objects.
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

from ...errors import CupyGraphError
from ...frames import code_of

__all__ = [
    "ForeignMemoryError", "ForeignMemoryWarning", "FoundArray", "Watch", "check_watches", "find_arrays", "warn_foreign",
    "watch_unowned",
]

_SKIPPED_MODULES = ("numpy", "cupy", "cupyx", "cupy_backends", "cupygraph", "builtins", "math", "functools")
MISSING = object()
"""What a watched path holds once it no longer resolves (a deleted global, a missing attribute)."""


class ForeignMemoryWarning(UserWarning):
    """A captured graph reads or writes device memory that is not an argument or owned by cupygraph."""


class ForeignMemoryError(CupyGraphError, RuntimeError):
    """Debug mode: an array a graph reads by address was freed or rebound since capture."""


class Watch:
    """Re-reads where an array was found and tells whether it is still the same, live object.

    Holds the array weakly (holding it would keep stale data alive behind the caller's back) and
    the root it was found from strongly (a cell, a globals dict, ``self``: the function holds them
    anyway).
    """

    __slots__ = ("_id", "_ref", "_root", "_steps", "name")

    def __init__(self, name: str, root: tuple[str, Any, Any], steps: tuple[tuple[str, Any], ...], array: Any):
        self.name = name
        self._root = root
        self._steps = steps
        self._id = id(array)
        try:
            self._ref: Optional[weakref.ref[Any]] = weakref.ref(array)
        except TypeError:  # no weak references: identity alone tells a rebinding
            self._ref = None

    def current(self) -> Any:
        """What the path holds now (``MISSING`` when it no longer resolves)."""
        kind, holder, key = self._root
        try:
            if kind == "cell":
                value = holder.cell_contents
            elif kind == "mapping":
                value = holder.get(key, MISSING)
            elif kind == "object":
                value = holder
            else:  # "attr"
                value = getattr(holder, key, MISSING)
            for step, part in self._steps:
                if value is MISSING:
                    break
                value = getattr(value, part, MISSING) if step == "attr" else value[part]
        except (ValueError, LookupError, TypeError):  # an emptied cell, a shorter list, a new type
            return MISSING
        return value

    def problem(self) -> Optional[str]:
        """None while the array is alive and still bound where it was found; else what happened."""
        current = self.current()
        if self._ref is not None and self._ref() is None:
            if current is MISSING:
                return "was deleted and its array freed"
            return "was rebound and the array the graph reads was freed"
        if id(current) != self._id:
            return "was rebound to another object (the graph still reads the old array)"
        return None


class FoundArray:
    """An array reachable from a function without being its argument, with where it was found."""

    __slots__ = ("array", "name", "watch")

    def __init__(self, name: str, array: Any, watch: Watch):
        self.name, self.array, self.watch = name, array, watch

    def __repr__(self) -> str:
        return f"FoundArray({self.name}, {describe_array(self.array)})"


def describe_array(array: Any) -> str:
    return f"{getattr(array, 'dtype', '?')}{list(getattr(array, 'shape', ()))}"


class _Scan:
    """One bounded walk from a function over what its code can reach."""

    def __init__(self, is_array: Callable[[Any], bool], max_depth: int, budget: int):
        self.is_array = is_array
        self.max_depth = max_depth
        self.budget = budget
        self.found: dict[Any, FoundArray] = {}
        self.seen_functions: set[int] = set()

    def visit(self, value: Any, name: str, root: tuple[str, Any, Any], steps: tuple[tuple[str, Any], ...],
              depth: int) -> None:
        self.budget -= 1
        if self.budget < 0:
            return
        if self.is_array(value):
            # A number is found wherever it is bound (small ints and interned values share one object).
            key: Any = (id(value), name) if isinstance(value, (int, float, complex)) else id(value)
            if key not in self.found:
                self.found[key] = FoundArray(name, value, Watch(name, root, steps, value))
            return
        if isinstance(value, (types.FunctionType, functools.partial, types.MethodType)):
            self.function(value, depth + 1)
            return
        if depth >= self.max_depth or isinstance(value, (str, bytes, int, float, complex, type, types.ModuleType)):
            return
        if isinstance(value, dict):
            for key in list(value)[:64]:
                self.visit(value[key], f"{name}[{key!r}]", root, (*steps, ("item", key)), depth + 1)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value[:64]):
                self.visit(item, f"{name}[{i}]", root, (*steps, ("item", i)), depth + 1)
        elif hasattr(value, "__dict__") and not callable(value):
            self.attributes(value, name, root, steps, depth + 1)

    def attributes(self, obj: Any, name: str, root: tuple[str, Any, Any], steps: tuple[tuple[str, Any], ...],
                   depth: int) -> None:
        try:
            items = list(vars(obj).items())[:64]
        except TypeError:
            return
        for attr, value in items:
            self.visit(value, f"{name}.{attr}", root, (*steps, ("attr", attr)), depth)

    def function(self, fn: Any, depth: int) -> None:
        if id(fn) in self.seen_functions or depth > self.max_depth + 1 or self.budget < 0:
            return
        self.seen_functions.add(id(fn))
        if isinstance(fn, functools.partial):
            for i, arg in enumerate(fn.args):
                self.visit(arg, f"partial argument {i}", ("attr", fn, "args"), (("item", i),), depth)
            for key, arg in (fn.keywords or {}).items():
                self.visit(arg, f"partial argument {key!r}", ("attr", fn, "keywords"), (("item", key),), depth)
            self.function(fn.func, depth)
            return
        if isinstance(fn, types.MethodType):
            self.attributes(fn.__self__, "self", ("attr", fn, "__self__"), (), depth)
            self.function(fn.__func__, depth)
            return
        if not isinstance(fn, types.FunctionType):
            if callable(fn) and hasattr(fn, "__dict__"):  # a callable object: its state is "self"
                self.attributes(fn, "self", ("object", fn, None), (), depth)
                call = vars(type(fn)).get("__call__")
                if isinstance(call, types.FunctionType):
                    self.function(call, depth)
            return
        if getattr(fn, "__module__", None) in _SKIPPED_MODULES:
            return
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None:
            self.function(wrapped, depth)
        code = fn.__code__
        for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # not yet assigned
                continue
            self.visit(value, f"closure variable {var!r}", ("cell", cell, None), (), depth)
        names = set(_code_names(code))
        module_globals = fn.__globals__
        for var in sorted(names):
            value = module_globals.get(var, MISSING)
            if value is MISSING:
                continue
            if isinstance(value, types.ModuleType):
                self.module_attributes(value, var, names, depth)
            else:
                self.visit(value, f"global {var!r}", ("mapping", module_globals, var), (), depth)
        positional = code.co_varnames[: code.co_argcount]
        for var, value in zip(positional[len(positional) - len(fn.__defaults__ or ()):], fn.__defaults__ or ()):
            self.visit(value, f"default of argument {var!r}", ("attr", fn, "__defaults__"),
                       (("item", positional.index(var) - len(positional) + len(fn.__defaults__ or ())),), depth)
        for var, value in (fn.__kwdefaults__ or {}).items():
            self.visit(value, f"default of argument {var!r}", ("attr", fn, "__kwdefaults__"), (("item", var),), depth)

    def module_attributes(self, module: types.ModuleType, alias: str, names: set[str], depth: int) -> None:
        if module.__name__.split(".", 1)[0] in _SKIPPED_MODULES:
            return
        for attr in sorted(names):
            value = getattr(module, attr, MISSING)
            if value is not MISSING and not isinstance(value, types.ModuleType):
                self.visit(value, f"module attribute {alias}.{attr}", ("attr", module, attr), (), depth)


def _code_names(code: types.CodeType) -> Iterator[str]:
    """Global and attribute names a code object (and the code nested in it) refers to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def find_arrays(
    fn: Any, is_array: Callable[[Any], bool], *, args: Sequence[Any] = (), max_depth: int = 2, budget: int = 5000
) -> list[FoundArray]:
    """Arrays ``fn`` can reach without arguments: closures, globals it names, defaults, ``self``, and
    the attributes of objects among ``args`` (a method's ``self``, a static argument): the call reads
    those by address too, while only the object is part of the key.

    Bounded by ``max_depth`` levels into containers and helper functions and by ``budget``
    values looked at, so a huge global dict cannot make a capture slow.
    """
    scan = _Scan(is_array, max_depth, budget)
    scan.function(fn, 0)
    code = code_of(fn)
    names = code.co_varnames[: code.co_argcount] if code is not None else ()
    for i, arg in enumerate(args):
        if not is_array(arg) and hasattr(arg, "__dict__") and not callable(arg):
            scan.attributes(arg, names[i] if i < len(names) else f"argument {i}", ("object", arg, None), (), 0)
    return list(scan.found.values())


def warn_foreign(fn: Any, lines: list[str], what: str) -> None:
    """One ``ForeignMemoryWarning`` for ``fn`` listing ``lines``, pointing at ``fn``'s definition.

    ``what`` completes "the graph of fn() ...", e.g. "reads or writes memory it does not own".
    """
    target = inspect.unwrap(getattr(fn, "__func__", fn)) if callable(fn) else fn
    code = getattr(target, "__code__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    message = (
        f"cupygraph: the graph of {name}() {what}:\n  " + "\n  ".join(lines) + "\n"
        "A graph replays raw addresses: if such an array is freed or rebound, replays read garbage or "
        "overwrite whatever reuses its memory. Pass it as an argument (batched, whole, or in "
        "constant_argnums), or keep it alive and bound for the graph's lifetime (debug=True checks)."
    )
    if code is None:
        warnings.warn(message, ForeignMemoryWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, ForeignMemoryWarning, code.co_filename, code.co_firstlineno,
                               module=getattr(target, "__module__", None) or "cupygraph")


def check_watches(watches: Sequence[Watch], fn_name: str) -> None:
    """Debug mode, before a replay: raise ``ForeignMemoryError`` when a watched array moved."""
    for watch in watches:
        problem = watch.problem()
        if problem is not None:
            raise ForeignMemoryError(
                f"{fn_name}(): {watch.name}, which its graph reads by address, {problem} since capture; the "
                "replay would use memory the graph does not own. Pass the array as an argument (batched, "
                "whole or constant_argnums), or keep it alive and bound, then clear() the function to re-capture"
            )


def watch_unowned(
    fn: Any, args: Sequence[Any], kwargs: dict[str, Any], is_array: Callable[[Any], bool],
    shares_memory: Callable[[Any, Any], bool], warned: set[str], found: Optional[Sequence[FoundArray]] = None,
) -> list[Watch]:
    """The host reference of the GPU audit: arrays ``fn`` reaches that share no memory with its
    arguments are read by address under a graph. Warn about each once per family (``warned``)
    and return their watches. ``found``: what ``find_arrays(fn, is_array)`` gave, when known.

    The host cannot see which of them a graph would touch, so every such array counts.
    """
    from ...pytree import flatten

    arguments = [leaf for value in (*args, *kwargs.values()) for leaf in flatten(value, is_array)[0]
                 if is_array(leaf)]
    watches, lines = [], []
    for reached in find_arrays(fn, is_array, args=args) if found is None else found:
        if getattr(reached.array, "size", 0) == 0 or any(shares_memory(reached.array, a) for a in arguments):
            continue
        label = f"{reached.name} ({describe_array(reached.array)})"
        watches.append(reached.watch)
        key = f"{label} #{id(reached.array)}"  # a new array under the same name warns again
        if key not in warned:
            warned.add(key)
            lines.append(label)
    if lines:
        warn_foreign(fn, lines, "reads arrays that are not its arguments, by address")
    return watches
