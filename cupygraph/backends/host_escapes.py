"""NumPy functions a host capture run refuses although no method of ``CaptureArray`` sees them.

* ``np.asarray(x)``, ``np.array(x)``, ``np.ascontiguousarray(x)``, ``np.asfortranarray(x)`` of a
  captured array hand back a plain ndarray without calling any of its methods, so a later
  ``float()`` of it went unseen. NumPy cannot convert a CuPy array at all (CuPy refuses implicit
  conversion to the host), so the GPU never captures this.
* NumPy's legacy ``np.random.*`` functions (the global ``RandomState``): their CuPy counterparts,
  ``cupy.random.*``, call cuRAND's host API, which CuPy cannot capture.

While a capture run is active in any thread, those names in the ``numpy`` and ``numpy.random``
namespaces are wrappers that refuse in a capturing thread and pass through everywhere else; the
last run to end puts the originals back. Code that bound a name before (``from numpy import
asarray``), and methods of a ``RandomState`` the function holds, are not caught.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from ..frames import is_library_frame
from ..reasons import FallbackReason
from .host_guard import CaptureArray, _refuse, capture_run_active

_CONVERTERS = ("asarray", "array", "ascontiguousarray", "asfortranarray")
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


def _refusing_conversion(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def converter(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, CaptureArray) and capture_run_active() and _from_user_code():
            _refuse(FallbackReason.DEVICE_TO_HOST,
                    f"np.{name}() of an array hands its data to the host (CuPy refuses to convert its arrays to "
                    "NumPy; keep it an array)")
        return original(obj, *args, **kwargs)

    return converter


def _refusing_draw(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def draw(*args: Any, **kwargs: Any) -> Any:
        if capture_run_active() and _from_user_code():
            _refuse(FallbackReason.LIBRARY_CALL, f"np.random.{name} uses {_RANDOM_HINT}")
        return original(*args, **kwargs)

    return draw


_lock = threading.Lock()
_runs = 0
_installed: list[tuple[ModuleType, str, Any, Any]] = []
"""(module, name, original, wrapper) of every name replaced while capture runs are active."""


def _install() -> None:
    targets = [(np, name, _refusing_conversion) for name in _CONVERTERS]
    targets += [(np.random, name, _refusing_draw) for name in _legacy_random_names()]
    for module, name, make in targets:
        original = getattr(module, name)
        wrapper = make(name, original)
        setattr(module, name, wrapper)
        _installed.append((module, name, original, wrapper))


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
