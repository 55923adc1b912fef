"""CuPy's legacy global generator (``cupy.random.*``) in a capture and its warm-ups: routed, or refused before it draws.

``cupy.random.standard_normal`` and the other module-level functions draw from one ``RandomState``
per device: through cuRAND's host API, which CuPy refuses on a capturing stream, or through a seed
kept on the host and passed to a kernel, which a graph would freeze (every replay drawing the same
numbers). That state cannot be read back (cuRAND keeps its offset to itself), so draws a warm-up
made could not be given back: the plain function's next call would draw other numbers than it does
without ``jit``. So while a capture and its warm-ups run in a thread, those functions, called from
the user's code, never reach that state. This module owns the interception and the refusal:

* with routing on (``backends/routing.py``), a call the recording's router takes
  (``routes/cupy_random.py``; which calls and arguments: ``routes/legacy_random.py``) draws from a
  ``cupygraph.random`` generator instead, fresh at every replay;
* every other call (routing off, ``gamma``, ``seed``, arguments no route takes) raises before it
  draws, and the capture fails with ``library_call`` naming the line and ``cupygraph.random``, which
  captures (with routing on, the refusal also says why the call was not routed).

The draws of the call itself are its eager run's (``cache/first_call.py``). The host reference
routes and refuses NumPy's legacy generator alike (``host_escapes``). Methods of a ``RandomState``
the function holds, and names bound before (``from cupy.random import rand`` in another module), are
not caught.

Imported only with the CuPy backend.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cupy

from ...errors import CaptureError
from ...frames import called_from_user
from ...hints import where_and_instead
from ...reasons import FallbackReason
from ..routing import LEGACY_RANDOM, NotRouted, route_or_refuse
from .uploads import Interception

__all__ = ["legacy_random_refused"]

_LEGACY_MODULES = ("cupy.random._distributions", "cupy.random._sample", "cupy.random._permutations")
_HINT = ("CuPy's legacy global generator (cuRAND's host API, or a seed kept on the host), which a graph cannot "
         "hold and whose draws in a warm-up could not be given back; use cupygraph.random.default_rng(seed), "
         "which captures")


class LegacyRandomRefused(CaptureError):
    """A legacy ``cupy.random`` call refused in a capture or its warm-ups (``reason``: its code)."""

    reason = FallbackReason.LIBRARY_CALL


def _targets() -> list[tuple[Any, str, str]]:
    """The module-level functions that draw from (or seed) the per-device global ``RandomState``."""
    names = [name for name in dir(cupy.random)
             if getattr(getattr(cupy.random, name), "__module__", "") in _LEGACY_MODULES]
    names += [name for name in ("seed",) if hasattr(cupy.random, name)]
    return [(cupy.random, name, f"cupy.random.{name}") for name in sorted(set(names))]


_interception = Interception(_targets)


@contextmanager
def legacy_random_refused(fn: Any = None) -> Iterator[None]:
    """Legacy ``cupy.random`` calls from the user's code refused in this thread meanwhile (``fn``'s
    module's own names for them too). The first refusal fails the block when it ends, also one the
    function caught, as a refused op fails a CUDA capture whatever the function did with the error."""
    first: list[LegacyRandomRefused] = []

    def refuse(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Frames: called_from_user <- this handler <- the replacement <- the caller.
        if called_from_user(2):
            try:
                return route_or_refuse(LEGACY_RANDOM, label, args, kwargs)
            except NotRouted as why:
                unrouted = f" (not routed: {why})" if str(why) else ""
            text = FallbackReason.LIBRARY_CALL.text
            where = where_and_instead(sys._getframe(0), FallbackReason.LIBRARY_CALL.value, xp="cupy")
            err = LegacyRandomRefused(f"{text}: {label}{unrouted} uses {_HINT}{where}")
            if not first:
                first.append(err)
            raise err
        return original(*args, **kwargs)

    try:
        with _interception.active(refuse, fn):
            yield
    except LegacyRandomRefused:
        raise
    except Exception as err:
        if first:  # the function turned the refusal into another error
            raise first[0] from err
        raise
    if first:
        raise first[0]
