"""One mechanism for binding cuBLAS (``_binding``) and cuBLASLt (``_lt_binding``), through nvmath or ctypes.

A library is described once, as data: its names (``Library``) and a binding class whose methods are
``Call`` entries (the C symbol, its ctypes prototype, nvmath's name for it). The same entries drive
both bindings:

* ``ctypes``: each symbol of the library CuPy loaded (found in the process's memory map after CuPy's
  cuBLAS module is imported), with the entry's prototype; a nonzero status raises ``CublasError``.
* ``nvmath``: the function of ``nvmath.bindings.<module>`` of that name; its error comes back as
  ``CublasError``.

An out-parameter the C function writes (a handle it creates, a version) is the value nvmath's function
returns, so one entry gives both the same ``int`` result. ``Library.load`` chooses between them by
name (``CUPYGRAPH_CUBLAS_BINDING`` = auto | nvmath | ctypes; auto: nvmath where installed).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
from collections.abc import Callable
from typing import Any, Generic, Optional, TypeVar, overload

from ..errors import BackendUnavailableError, CupyGraphError

BINDINGS = ("auto", "nvmath", "ctypes")
ENV = "CUPYGRAPH_CUBLAS_BINDING"
# nvmath-python comes with the GPU extras (setup.cfg): an error for a missing one says how to get it.
NVMATH_INSTALL = "pip install 'cupygraph[cuda13]' (or [cuda12]), or pip install nvmath-python"
STATUS = ctypes.c_int  # cublasStatus_t: the return type of every entry point that reports one

_STATUS_NAMES = {
    1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}


class CublasError(CupyGraphError, RuntimeError):
    """A cuBLAS call returned an error status."""

    def __init__(self, call: str, status: int):
        super().__init__(f"{call} failed with {_STATUS_NAMES.get(status, 'cuBLAS status')} ({status})")
        self.call, self.status = call, status


class Call:
    """One entry point, as a method of a binding class.

    ``symbol``/``argtypes``/``restype``: the C function and its prototype (``STATUS``: the status is
    checked and the method returns None; any other type: the method returns that value as an int).
    ``nvmath``: the function's name in nvmath's module. ``made``: the ctypes type of an out-parameter
    the C function writes at ``made_at`` (the caller passes the other arguments); the method returns it.
    """

    def __init__(self, symbol: str, nvmath: str, argtypes: list[Any], restype: Any = STATUS,
                 made: Any = None, made_at: int = 0):
        self.symbol, self.nvmath, self.argtypes, self.restype = symbol, nvmath, argtypes, restype
        self.made, self.made_at = made, made_at
        self.method = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.method = name

    @overload
    def __get__(self, binding: None, owner: Optional[type] = None) -> Call: ...
    @overload
    def __get__(self, binding: TableBinding, owner: Optional[type] = None) -> Callable[..., Any]: ...
    def __get__(self, binding: Optional[TableBinding], owner: Optional[type] = None) -> Any:
        return self if binding is None else binding.prepared[self.method]


class TableBinding:
    """A binding whose methods are the ``Call`` entries of its class, each prepared once by ``via``."""

    def __init__(self, via: Via):
        self.name, self.library_path = via.name, via.library_path
        self.via = via
        self.prepared = {call.method: via.prepare(call) for call in calls(type(self))}


def calls(binding_class: type) -> list[Call]:
    """The entry points of a binding class (its ``Call`` attributes, its bases' included)."""
    found: dict[str, Call] = {}
    for klass in reversed(binding_class.__mro__):
        found.update({name: value for name, value in vars(klass).items() if isinstance(value, Call)})
    return list(found.values())


class Via:
    """How a binding reaches its library: ``prepare(call)`` gives the callable behind one entry."""

    name: str
    library_path: str

    def prepare(self, call: Call) -> Callable[..., Any]:
        raise NotImplementedError


class CtypesVia(Via):
    """The C functions of a library loaded with ctypes."""

    name = "ctypes"

    def __init__(self, lib: Any, library_path: str):
        self._lib, self.library_path = lib, library_path

    def prepare(self, call: Call) -> Callable[..., Any]:
        try:
            fn = getattr(self._lib, call.symbol)
        except AttributeError as err:
            raise BackendUnavailableError(f"the ctypes binding found no {call.symbol} in {self.library_path} "
                                          f"({err}); set {ENV}=nvmath to use nvmath-python's") from err
        fn.argtypes, fn.restype = call.argtypes, call.restype
        symbol, made_type, at = call.symbol, call.made, call.made_at
        if call.restype is not STATUS:
            return lambda *args: int(fn(*args))

        def checked(*args: Any) -> None:
            status = fn(*args)
            if status:
                raise CublasError(symbol, status)

        if made_type is None:
            return checked

        def make(*args: Any) -> int:
            made = made_type()
            checked(*args[:at], ctypes.addressof(made), *args[at:])
            return int(made.value or 0)

        return make


class NvmathVia(Via):
    """The functions of ``nvmath.bindings.<module>``; nvmath's error comes back as ``CublasError``."""

    name = "nvmath"

    def __init__(self, module: Any, error: type[BaseException], library_path: str):
        self._module, self._error, self.library_path = module, error, library_path

    def prepare(self, call: Call) -> Callable[..., Any]:
        module, error, name = self._module, self._error, call.nvmath
        label = f"{module.__name__}.{name}"
        returns = call.made is not None or call.restype is not STATUS

        def run(*args: Any) -> Any:
            try:
                result = getattr(module, name)(*args)
            except error as err:
                raise CublasError(label, int(getattr(err, "status", -1))) from err
            return int(result) if returns else None

        return run


def library_in_maps(maps: str, stem: str = "libcublas.so") -> Optional[str]:
    """The path of the first mapped file named ``stem``* (not cublasLt) in a /proc/<pid>/maps text."""
    pattern = re.compile(r"(/\S*/" + re.escape(stem) + r"[\w.]*)$")
    for line in maps.splitlines():
        found = pattern.search(line.strip())
        if found:
            return found.group(1)
    return None


def mapped_library(stem: str) -> Optional[str]:
    """The loaded library file named ``stem``* in this process's memory map, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return library_in_maps(maps.read(), stem)
    except OSError:  # not Linux: fall back to the loader's search
        return None


def requested_binding() -> str:
    """The binding asked for through ``CUPYGRAPH_CUBLAS_BINDING`` (default ``auto``)."""
    name = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if name not in BINDINGS:
        raise ValueError(f"{ENV}={name!r} is not a cuBLAS binding; valid: {', '.join(BINDINGS)}")
    return name


B = TypeVar("B", bound=TableBinding)


class Library(Generic[B]):
    """One NVIDIA library: the one place its names are spelled, and its bindings, loaded once per process."""

    def __init__(self, name: str, stem: str, nvmath_module: str, nvmath_error: str, binding: type[B]):
        """``name``: as messages spell it ("cuBLAS"); ``stem``: its file ("libcublas.so"); ``nvmath_module``:
        its module of ``nvmath.bindings`` and ``nvmath_error`` that module's exception; ``binding``: the
        class of its entry points."""
        self.name, self.stem, self._binding = name, stem, binding
        self._nvmath_module, self._nvmath_error = nvmath_module, nvmath_error
        self._loaded: dict[str, B] = {}

    def load(self, name: str) -> B:
        """The binding ``name`` (``auto``: nvmath where installed, else ctypes), loaded once per process.

        Raises ``BackendUnavailableError`` saying what is missing.
        """
        found = self._loaded.get(name)
        if found is not None:
            return found
        if name not in BINDINGS:
            raise ValueError(f"unknown cuBLAS binding {name!r}; valid: {', '.join(BINDINGS)}")
        if name == "auto":
            try:
                made = self.load("nvmath")
            except BackendUnavailableError:
                made = self.load("ctypes")
        else:
            made = self.nvmath() if name == "nvmath" else self.ctypes()
        return self._loaded.setdefault(name, made)

    def binding(self) -> B:
        """The binding this process uses (``CUPYGRAPH_CUBLAS_BINDING``, read at the first call)."""
        return self.load(requested_binding())

    def ctypes(self, lib: Any = None, library_path: str = "") -> B:
        """The ctypes binding; ``lib``: an already loaded library (tests pass a stand-in), else the one
        CuPy's libcublas loaded."""
        if lib is None:
            lib, library_path = self._open()
        return self._binding(CtypesVia(lib, library_path))

    def nvmath(self) -> B:
        try:  # by name: nvmath is optional and ships no type information
            module = importlib.import_module(f"nvmath.bindings.{self._nvmath_module}")
        except Exception as err:
            raise BackendUnavailableError(
                f"the nvmath {self.name} binding needs nvmath-python ({NVMATH_INSTALL}): "
                f"{type(err).__name__}: {err}") from err
        path = mapped_library(self.stem) or f"{self.stem.removesuffix('.so')} (loaded by nvmath)"
        return self._binding(NvmathVia(module, getattr(module, self._nvmath_error, Exception), path))

    def _open(self) -> tuple[Any, str]:
        try:
            import cupy_backends.cuda.libs.cublas  # noqa: F401  (loads CuPy's libcublas, and with it libcublasLt)
        except Exception as err:
            raise BackendUnavailableError(
                f"the ctypes {self.name} binding needs CuPy's libcublas: CuPy's cuBLAS module is not importable "
                f"({type(err).__name__}: {err})") from err
        path = mapped_library(self.stem)
        candidates = [path] if path else [f"{self.stem}.13", f"{self.stem}.12", self.stem]
        for candidate in candidates:
            try:
                return ctypes.CDLL(candidate), candidate
            except OSError:
                continue
        raise BackendUnavailableError(
            f"the ctypes {self.name} binding found no {self.stem.removesuffix('.so')} (tried {candidates})")

    def signatures(self) -> dict[str, tuple[Any, list[Any]]]:
        """Each C symbol the ctypes binding calls: (return type, argument types)."""
        return {call.symbol: (call.restype, call.argtypes) for call in calls(self._binding)}
