"""Kernels built with CuPy's own classes: which object loaded a graph's kernel, and from what source.

A graph's kernel node names a function (CUfunction) and, through it, the module (CUmodule) it
lives in; the driver cannot give back the code it was loaded from. The CuPy object a user
launched can: ``cupy.RawKernel`` and ``cupy.RawModule`` keep their source and NVRTC options
(``code``, ``options``; the rest in ``RawKernel.__getstate__``) and hand out the module CuPy loaded
for them on the current device (``kernel.module``); a ``cupy.ElementwiseKernel`` keeps the function
of every specialisation it compiled (``_elementwise_kernel_memo``), whose source CuPy's own
generator gives again from the same key.

So a node's kernel is placed by asking candidate objects for the module they loaded, and keeping
the one whose module *is* the node's: first the objects the captured function reaches (closures,
globals, ``self``: ``reachable``, from the capture), then, for a kernel still not placed, every
live one (``gc.get_objects``, at most once per capture). The match is by handle, so it is never a
guess: a CUmodule handle names one loaded module, CuPy loaded that module from exactly the
object's source and options, and the module is held from then on (``modules.remember``), so no
other module can take the handle while this process remembers it. The module's code is then
scanned like one compiled through ``pdl_module``.

Not found, so not scanned (edges into it stay plain): CuPy's ufuncs and reductions, cupyx.jit
kernels, libraries, objects frozen by ``gc.freeze()`` or already dropped. Found but not scanned:
a module loaded from a file, or compiled with nvcc, jitify or ``translate_cucomplex`` (the scan
could not repeat the compile). Asking an object whose kernel has the node's name for its module
compiles it on this device if it was not yet; nothing else is compiled.
"""

from __future__ import annotations

import functools
import gc
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Optional

from .modules import KnownModule, remember

__all__ = ["NOT_FOUND", "KernelFinder", "is_kernel_object", "kernel_types"]

NOT_FOUND = ("not scanned: no live cupy.RawKernel, RawModule or ElementwiseKernel loaded its module (CuPy's "
             "ufuncs and reductions, cupyx.jit, libraries, an object since dropped)")
_MAX_UNPLACED = 4096
_MANGLED_PART = re.compile(r"(\d+)([A-Za-z_]\w*)")

_lock = threading.Lock()
_unplaced: dict[tuple[int, int, str], None] = {}
"""(device, module handle, kernel name) that no live object held at a full search: not searched
again (a later capture of the same kernel then costs no walk over every object)."""


@functools.cache
def kernel_types() -> tuple[type, ...]:
    """CuPy's kernel classes whose objects keep their source; () without CuPy."""
    try:
        import cupy
    except Exception:  # no CuPy, or one that cannot load: nothing to find
        return ()
    found = (getattr(cupy, name, None) for name in ("RawKernel", "RawModule", "ElementwiseKernel"))
    return tuple(kind for kind in found if isinstance(kind, type))


def is_kernel_object(value: Any) -> bool:
    """Whether ``value`` is a CuPy kernel object this module can place (the capture's walk asks)."""
    kinds = kernel_types()
    return bool(kinds) and isinstance(value, kinds)


class KernelFinder:
    """One capture's search for the CuPy objects behind its kernels, on the capture's (current) device."""

    def __init__(self, device: int, reachable: Callable[[], Iterable[Any]]):
        self.device = device
        self._reachable = reachable
        self._near: Optional[list[Any]] = None
        self._live: Optional[list[Any]] = None

    def find(self, handle: int, name: str) -> Optional[KnownModule]:
        """The module (source, or why it cannot be scanned) of kernel ``name`` in CUmodule ``handle``."""
        if self._near is None:
            self._near = _listed(self._reachable)
        found = _first_match(self._near, handle, name, self.device)
        if found is not None:
            return found
        key = (self.device, int(handle), name)
        with _lock:
            if key in _unplaced:
                return None
        if self._live is None:
            self._live = live_kernel_objects()
        found = _first_match(self._live, handle, name, self.device)
        if found is None:
            with _lock:
                if len(_unplaced) >= _MAX_UNPLACED:
                    _unplaced.clear()
                _unplaced[key] = None
        return found


def live_kernel_objects() -> list[Any]:
    """Every CuPy kernel object the garbage collector tracks (not those ``gc.freeze()`` set aside)."""
    kinds = kernel_types()
    # type(), not isinstance(): isinstance also asks an object's ``__class__``, which some objects compute
    # (torch's deprecated module attributes warn when touched); a kernel object's type is its class.
    return [obj for obj in gc.get_objects() if issubclass(type(obj), kinds)] if kinds else []


def _listed(reachable: Callable[[], Iterable[Any]]) -> list[Any]:
    try:
        return list(reachable())
    except Exception:  # the walk is a shortcut: without it, the full search still runs
        return []


def _first_match(objects: Iterable[Any], handle: int, name: str, device: int) -> Optional[KnownModule]:
    for obj in objects:
        try:
            found = _match(obj, int(handle), name, device)
        except Exception:  # an object that cannot compile or load here did not load this module
            continue
        if found is not None:
            return found
    return None


def _match(obj: Any, handle: int, name: str, device: int) -> Optional[KnownModule]:
    if hasattr(obj, "_elementwise_kernel_memo"):
        return _match_elementwise(obj, handle, name, device)
    if hasattr(obj, "get_function"):  # a RawModule: its kernel of that name, from the same loaded module
        code = getattr(obj, "code", None)
        if code is None:  # loaded from a file: no source, but say so when it is this module
            module = obj.module
            return remember(device, handle, module, refused=_FROM_FILE) if int(module.ptr) == handle else None
        if not may_define(code, name):
            return None
        obj = obj.get_function(name)
    if getattr(obj, "name", None) != name:
        return None
    module = obj.kernel.module
    if int(module.ptr) != handle:
        return None
    state = obj.__getstate__()  # RawKernel: everything its module was compiled with
    if not isinstance(state, dict):
        return remember(device, handle, module, refused="not scanned: this CuPy does not say how it compiled the "
                                                        "kernel")
    refused = _refusal(state)
    if refused:
        return remember(device, handle, module, refused=refused)
    return remember(device, handle, module, state["code"], tuple(state.get("options") or ()),
                    tuple(state.get("name_expressions") or ()))


_FROM_FILE = "not scanned: loaded from a file (cubin or PTX), whose source cupygraph does not have"


def _refusal(state: dict[str, Any]) -> str:
    """Why the compile of a RawKernel with this state cannot be repeated for the scan ('' when it can)."""
    if state.get("file_path") is not None or not isinstance(state.get("code"), str):
        return _FROM_FILE
    if state.get("backend", "nvrtc") != "nvrtc":
        return f"not scanned: compiled with backend={state.get('backend')!r}; the scan repeats NVRTC compiles only"
    for flag in ("jitify", "translate_cucomplex"):
        if state.get(flag):
            return f"not scanned: compiled with {flag}=True, which rewrites its source"
    return ""


def _match_elementwise(kernel: Any, handle: int, name: str, device: int) -> Optional[KnownModule]:
    if getattr(kernel, "name", None) != name:
        return None
    for key, function in list(kernel._elementwise_kernel_memo.items()):
        module = function.module
        if int(module.ptr) == handle:
            prefix, code, options = elementwise_source(kernel, key)
            return remember(device, handle, module, code, options, prefix=prefix)
    return None


def elementwise_source(kernel: Any, key: tuple[Any, ...]) -> tuple[str, str, tuple[str, ...]]:
    """(CuPy's headers, the generated code, the options) CuPy compiled ``kernel``'s specialisation
    ``key`` (device, argument infos, type map) from: its own generator, called as it calls it."""
    from cupy._core import _kernel, core

    _, arginfos, type_map = key
    kwargs = dict(kernel.kwargs)
    code = _kernel._get_elementwise_kernel_code(arginfos, type_map, kernel.params, kernel.operation, kernel.name,
                                                kernel.preamble, **kwargs)
    headers = "".join(f"#include <{header}>\n" for header in core._cupy_header_list)
    return headers, str(code), tuple(kwargs.get("options") or ())


def may_define(code: str, name: str) -> bool:
    """Whether ``code`` could define the kernel ``name`` (a C name, or a C++ mangled one): a filter
    that keeps the search from compiling modules that cannot hold the kernel; the handle decides."""
    if not name.startswith("_Z"):
        return name in code
    parts = [ident[:int(length)] for length, ident in _MANGLED_PART.findall(name) if len(ident) >= int(length)]
    return not parts or any(part in code for part in parts)
