"""Which line of the user's own code an error or a refused op comes from.

Fallback reasons end with ``(at model.py:12: y = x @ w)``. The frame named is the innermost one
that belongs to neither the array libraries nor cupygraph. A frame belongs to a library when its
module (``f_globals["__name__"]``) is inside one of ``LIBRARY_PACKAGES``, or its file is: CuPy's
compiled frames carry relative paths (``cupy/_core/core.pyx``), installed ones absolute paths
under ``site-packages/cupy/``, and a checkout's may live anywhere, so each form is checked.
A user's project that merely sits in a folder called ``cupygraph`` is not a library frame.

``call_site_*`` also say which library function the user's line called (the outermost library
frame below it, e.g. ``cupy.linalg._solve.solve``, past the wrapper and router of a routed call), so a
reason can name a capturable replacement.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
import traceback
from types import CodeType, FrameType
from typing import Any, NamedTuple, Optional

# fastrlock: CuPy takes its locks there, so it can be the innermost frame of a refused op. scipy: the host
# reference's twin of cupyx (a refused ``csr @ x`` is refused inside ``scipy.sparse``).
LIBRARY_PACKAGES = frozenset({"cupy", "cupyx", "cupy_backends", "cupygraph", "fastrlock", "numpy", "scipy"})


def _package_dirs() -> list[str]:
    """Directories of the library packages imported here, as normalised path prefixes."""
    dirs = []
    for name in LIBRARY_PACKAGES:
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str):
            dirs.append(os.path.dirname(os.path.abspath(file)).replace("\\", "/").rstrip("/") + "/")
    return dirs


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` is a file of a library package, whatever form the path takes."""
    path = filename.replace("\\", "/")
    if path.startswith("<frozen importlib"):  # the import machinery (a C extension's module init)
        return True
    if path.startswith("<"):  # <string>, <stdin>, other <frozen ...>: not a package file
        return False
    parts = [p for p in path.split("/") if p]
    if not parts:
        return False
    absolute = path.startswith("/") or (len(path) > 1 and path[1] == ":")
    if not absolute:
        # Compiled (Cython) frames: ``cupy/_core/core.pyx`` relative to the package root.
        return parts[0] in LIBRARY_PACKAGES
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") and parts[i + 1] in LIBRARY_PACKAGES:
            return True
    return any(path.startswith(prefix) for prefix in _package_dirs())


def is_library_frame(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__")
    if isinstance(module, str) and module.split(".", 1)[0] in LIBRARY_PACKAGES:
        return True
    return is_library_file(frame.f_code.co_filename)


def called_from_user(depth: int, skip_package: str = "") -> bool:
    """Whether the frame ``depth`` levels above the caller (``sys._getframe(depth)`` there) is the
    user's code, not cupygraph's or a library's; frames of the top-level package ``skip_package``, and
    interception wrappers that passed a call on as it is, are passed over first (the interceptions of
    ``backends/guards/host_uploads.py`` and ``host_escapes.py`` ask this of the call they intercepted)."""
    frame: Optional[FrameType] = sys._getframe(depth + 1)
    while frame is not None and (_passed_through(frame) or (
            skip_package and str(frame.f_globals.get("__name__", "")).split(".", 1)[0] == skip_package)):
        frame = frame.f_back
    return frame is not None and not is_library_frame(frame)


def format_location(filename: str, lineno: int) -> str:
    """`` (at file.py:LINE: code)``; without the code where the source cannot be read."""
    code = linecache.getline(filename, lineno).strip()
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return f" (at {name}:{lineno}: {code})" if code else f" (at {name}:{lineno})"


class CallSite(NamedTuple):
    """The user's line that reached a library, and which library function it called."""

    filename: str
    lineno: int
    called: str
    """``module.function`` of the outermost library frame below the user's line ("" if unknown)."""

    @property
    def code(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def location(self) -> str:
        return format_location(self.filename, self.lineno)


_PASSED_THROUGH = "cupygraph.backends.guards.uploads"
"""The module of ``Interception``'s wrappers, whose frames stand between a user's line and the library
function it called while a recording intercepts it (a router that leaves the call as it is): passed
over, never named as the function called, never taken for the caller."""


def _passed_through(frame: FrameType) -> bool:
    return frame.f_globals.get("__name__") == _PASSED_THROUGH


def _qualified(frame: FrameType) -> str:
    module = frame.f_globals.get("__name__")
    name = frame.f_code.co_name
    return f"{module}.{name}" if isinstance(module, str) else name


def call_site_in_traceback(err: BaseException) -> Optional[CallSite]:
    """The innermost user frame of ``err``'s traceback and the library function it called."""
    site: Optional[CallSite] = None
    for frame, lineno in traceback.walk_tb(err.__traceback__):
        if not is_library_frame(frame):
            site = CallSite(frame.f_code.co_filename, lineno, "")
        elif site is not None and not site.called and not _passed_through(frame):
            site = site._replace(called=_qualified(frame))
    return site


def call_site_in_stack(frame: Optional[FrameType]) -> Optional[CallSite]:
    """The innermost user frame from ``frame`` outwards and the library function it called."""
    called = ""
    while frame is not None:
        if not is_library_frame(frame):
            return CallSite(frame.f_code.co_filename, frame.f_lineno, called)
        if not _passed_through(frame):
            called = _qualified(frame)
        frame = frame.f_back
    return None


def location_in_traceback(err: BaseException) -> str:
    """The innermost user frame of ``err``'s traceback as `` (at file:line: code)``, or ``""``."""
    site = call_site_in_traceback(err)
    return "" if site is None else site.location()


def location_in_stack(frame: Optional[FrameType]) -> str:
    """The innermost user frame from ``frame`` outwards as `` (at file:line: code)``, or ``""``."""
    site = call_site_in_stack(frame)
    return "" if site is None else site.location()


def code_of(fn: Any) -> Optional[CodeType]:
    """The code a call of ``fn`` runs first: a function's, a bound method's, a partial's function's, a
    callable object's ``__call__``'s (decorators that set ``__wrapped__`` are looked through)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        code = getattr(inspect.getattr_static(type(fn), "__call__", None), "__code__", None)
    return code if isinstance(code, CodeType) else None


def raised_through(err: BaseException, fn: Any) -> bool:
    """Whether ``err`` came out of a call of ``fn`` (its frame is in the traceback), not from code around it."""
    code = code_of(fn)
    return code is not None and any(frame.f_code is code for frame, _ in traceback.walk_tb(err.__traceback__))
