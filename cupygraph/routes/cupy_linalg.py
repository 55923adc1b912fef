"""``cupy.linalg`` and cupyx CSR products routed to cupygraph.linalg while a function is recorded (issue 29).

CuPy refuses cuSOLVER and cuSPARSE on a capturing stream, so ``cupy.linalg.solve(a, b)`` or
``csr @ x`` made a capture fall back. While a recording runs in a thread, the ``cupy.linalg``
functions of ``linalg/routable.ROUTED_FUNCTIONS`` and the products of ``cupyx.scipy.sparse``'s CSR
classes (``@`` either way round, ``dot``, ``csr_matrix``'s ``*``) are replaced (``uploads.Interception``:
every other thread keeps CuPy's own, and the user's module's own names for them are replaced too).
A call the user's code makes that ``linalg_call`` / ``sparse_call`` accepts runs cupygraph.linalg's
capture-safe implementation (``cupy_linalg_calls``) and is noted as routed (``cuSOLVER`` or ``cuSPARSE`` and
the user's line); any other call is CuPy's own, and fails the capture as before with the reason naming
the user's line and the replacement. Not routed either: calls CuPy makes itself (``cupy.polyfit``
calling ``cupy.linalg.lstsq``: the host reference refuses ``np.polyfit`` whole), and every cuSOLVER
call under ``cupyx.errstate(linalg="raise")``, which asks for an exception a graph cannot raise (the
key then runs eagerly and raises as CuPy does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from ..backends.guards.uploads import UNTOUCHED, Interception
from ..backends.routing import note_routed, routing_enabled
from ..frames import called_from_user, location_in_stack
from ..linalg.routable import SPARSE_LABEL, RoutedCall, linalg_call, routed_targets, sparse_call

__all__ = ["linalg_errors_raised", "routed_linalg"]



def _targets() -> list[tuple[Any, str, str]]:
    linalg = getattr(sys.modules.get("cupy"), "linalg", None)  # (None: a stand-in for CuPy, the tests' fakes)
    return routed_targets(linalg, sys.modules.get("cupyx.scipy.sparse"))


_interception = Interception(_targets)


def linalg_errors_raised() -> bool:
    """Whether CuPy was asked to read cuSOLVER's ``info`` and raise (``cupyx.errstate(linalg="raise")``;
    never where cupyx was not imported)."""
    cupyx = sys.modules.get("cupyx")
    return cupyx is not None and cupyx.geterr().get("linalg") == "raise"


def _call(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[RoutedCall]:
    """The call to route, or None to leave it to CuPy."""
    import cupy

    if label.startswith(SPARSE_LABEL):
        if len(args) != 2 or kwargs:
            return None
        call = sparse_call(label[len(SPARSE_LABEL):], args[0], args[1])
        return call if call is not None and isinstance(args[1], cupy.ndarray) else None
    call = linalg_call(label, args, kwargs)
    if call is None or not all(isinstance(x, cupy.ndarray) for x in call.arrays) or linalg_errors_raised():
        return None
    return call


def _route(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Frames: called_from_user <- _route <- the replacement <- the caller
    if not routing_enabled() or not called_from_user(2):
        return UNTOUCHED
    call = _call(label, args, kwargs)
    if call is None or call.own_code:  # (CuPy's own code: its library calls are routed, cupy_libraries.py)
        return UNTOUCHED
    from .cupy_linalg_calls import run

    result = run(call)
    note_routed(f"{call.library}{location_in_stack(sys._getframe(1))}")  # the host notes the same label
    return result


@contextmanager
def routed_linalg(fn: Any = None) -> Iterator[None]:
    """``cupy.linalg``'s routed functions and cupyx's CSR products in this thread run capture-safe meanwhile."""
    with _interception.active(_route, fn):
        yield
