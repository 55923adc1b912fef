"""NumPy functions a host capture run refuses although no method of ``CaptureArray`` sees them.

* NumPy's legacy ``np.random.*`` functions (the global ``RandomState``): their CuPy counterparts,
  ``cupy.random.*``, call cuRAND's host API, which CuPy cannot capture.
* SciPy sparse products (``csr @ x``, ``csr.dot(x)``; when SciPy is imported): their GPU
  counterparts in ``cupyx.scipy.sparse`` run cuSPARSE, which CuPy cannot capture.

While a capture run is active in any thread, those names in the ``numpy.random``
namespace are wrappers that refuse in a capturing thread and pass through everywhere else; the
last run to end puts the originals back. Code that bound a name before (``from numpy.random
import rand``), and methods of a ``RandomState`` the function holds, are not caught.

``np.asarray(x)`` and the other array creators are not refused: they mirror ``cupy.asarray``, a
no-op on a device array. ``host_uploads.py`` keeps their result a ``CaptureArray`` (so a later
``float()`` of it is refused) and treats them on host data as uploads.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional

import numpy as np

from ..frames import is_library_frame
from ..reasons import FallbackReason
from .host_guard import _refuse, capture_run_active

_RANDOM_HINT = ("NumPy's legacy global generator, whose GPU counterpart cupy.random calls cuRAND's host API, which "
                "CuPy cannot capture; use cupygraph.random.default_rng(seed), which captures")


def _legacy_random_names() -> list[str]:
    """The ``np.random`` functions that draw from (or seed) the legacy global ``RandomState``."""
    state = np.random.mtrand._rand
    names = [name for name in dir(np.random) if getattr(getattr(np.random, name), "__self__", None) is state]
    return names + [name for name in ("seed", "ranf", "sample") if hasattr(np.random, name)]


def _from_user_code() -> bool:
    """Whether the wrapper's caller is the user's code (NumPy and cupygraph convert plain views)."""
    return not is_library_frame(sys._getframe(2))


def _refusing_draw(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def draw(*args: Any, **kwargs: Any) -> Any:
        if capture_run_active() and _from_user_code():
            _refuse(FallbackReason.LIBRARY_CALL, f"np.random.{name} uses {_RANDOM_HINT}")
        return original(*args, **kwargs)

    return draw


_SPARSE_HINT = ("a SciPy sparse product, whose GPU counterpart (cupyx.scipy.sparse) runs cuSPARSE, which CuPy "
                "cannot capture; use cupygraph.linalg.spmm(csr, dense), which captures")


def _called_from_user_past_scipy() -> bool:
    """Whether the first frame outside SciPy (above the wrapper) is the user's: cupygraph's own host
    spmm multiplies sparse matrices too, and must not be refused."""
    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".", 1)[0] == "scipy":
        frame = frame.f_back
    return frame is not None and not is_library_frame(frame)


def _refusing_sparse_product(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def product(*args: Any, **kwargs: Any) -> Any:
        if capture_run_active() and _called_from_user_past_scipy():
            _refuse(FallbackReason.LIBRARY_CALL, _SPARSE_HINT)
        return original(*args, **kwargs)

    return product


def _sparse_targets() -> list[tuple[Any, str]]:
    """SciPy's sparse product entry points, when SciPy is in use (never imported here)."""
    base = sys.modules.get("scipy.sparse._base")
    owner = getattr(base, "_spbase", None)
    return [(owner, name) for name in ("_matmul_dispatch", "_rmatmul_dispatch") if owner is not None
            and name in vars(owner)]


_lock = threading.Lock()
_runs = 0
_installed: list[tuple[Any, str, Any, Any]] = []
"""(module, name, original, wrapper) of every name replaced while capture runs are active."""


def _install() -> None:
    for name in _legacy_random_names():
        module, original = np.random, getattr(np.random, name)
        wrapper = _refusing_draw(name, original)
        setattr(module, name, wrapper)
        _installed.append((module, name, original, wrapper))
    for owner, name in _sparse_targets():
        original = vars(owner)[name]
        wrapper = _refusing_sparse_product(name, original)
        setattr(owner, name, wrapper)
        _installed.append((owner, name, original, wrapper))


def _uninstall() -> None:
    while _installed:
        module, name, original, wrapper = _installed.pop()
        if getattr(module, name) is wrapper:  # not replaced again by someone else meanwhile
            setattr(module, name, original)


@contextmanager
def numpy_escapes_refused() -> Iterator[None]:
    """The wrappers in place for as long as any thread's capture run lasts."""
    global _runs
    with _lock:
        if _runs == 0:
            _install()
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                _uninstall()
