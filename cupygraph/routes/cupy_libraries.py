"""CuPy's cuBLAS and cuSOLVER calls routed to cupygraph's handles while a function is recorded (issue 29).

Every CuPy product that reaches cuBLAS (``x @ W``, ``cupy.matmul``, ``dot``, ``ndarray.dot``,
``tensordot``, ``inner``, ``einsum``, ``cov``, ``asfortranarray`` of a matrix, ...) and every
``cupy.linalg`` factorisation that reaches cuSOLVER (``solve``, ``inv``, ``cholesky``, ``qr``, ``det``,
``slogdet``) does it through functions of ``cupy_backends.cuda.libs.cublas`` / ``.cusolver``, which
CuPy looks up on those modules at every call (its code imports them inside each function). Those
functions refuse a capturing stream (their ``setStream`` raises), which made such a function fall back.

While a recording runs in a thread, each of them is replaced (``uploads.Interception``: every other
thread keeps CuPy's own): CuPy's handle is set aside, and the call runs with CuPy's own arguments on
cupygraph's handle of this thread, bound to the current stream (``linalg/cublas_calls.py``,
``linalg/cusolver_calls.py``: nothing is allocated during the capture, and the graph holds the
handles and workspace it captured with). Same routine, operands, layouts, transposes, scalars,
compute type and algorithm choice as CuPy's: the routed result is the one CuPy computes. For cuBLAS
bit for bit where it picks the same kernel on both handles; it may choose by the workspace it has,
and ours is cuBLAS's default size (32 MiB on Hopper, 4 MiB before), so they agree
(``tests/gpu/test_routes_gpu.py`` checks it on the GPU).

Integer products never reach cuBLAS (CuPy's own kernels capture as they are), nor do products of
one element (a reduction kernel). cuSOLVER routines that fail under capture (CuPy's ``eigh`` and
``svd``) are not routed here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..backends.guards.uploads import Interception
from ..backends.routing import note_routed, routing_enabled
from ..errors import BackendUnavailableError
from ..frames import location_in_stack
from ..linalg import cublas_calls, cusolver_calls
from .cupy_linalg import linalg_errors_raised

__all__ = ["routed_cupy_libraries"]


def _targets() -> list[tuple[Any, str, str]]:
    try:
        from cupy_backends.cuda.libs import cublas, cusolver
    except ImportError:  # a stand-in for CuPy (the test suite's fakes): it reaches no library to route
        return []
    return ([(cublas, name, f"cuBLAS:{name}") for name in cublas_calls.CUPY_CUBLAS_CALLS if hasattr(cublas, name)]
            + [(cusolver, name, f"cuSOLVER:{name}") for name in sorted(cusolver_calls.CUPY_CUSOLVER_CALLS)
               if hasattr(cusolver, name)])


_interception = Interception(_targets)


def _route(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # CuPy passes every argument by position (anything else is not CuPy's call).
    if kwargs or not args or not routing_enabled():
        return original(*args, **kwargs)
    library, name = label.split(":")
    # Under ``cupyx.errstate(linalg="raise")`` CuPy reads a factorisation's ``info`` on the host and raises,
    # which a graph cannot: its own call then fails the capture (the key runs eagerly). Products have none.
    if (library == "cuSOLVER" or name in cublas_calls.REPORTS_INFO) and linalg_errors_raised():
        return original(*args, **kwargs)
    if library == "cuBLAS" and not cublas_calls.routable(args):  # scalars on the device: CuPy's own
        return original(*args, **kwargs)
    try:
        result = (cublas_calls if library == "cuBLAS" else cusolver_calls).run_as_cupy_would(name, args)
    except BackendUnavailableError:  # no nvmath-python (cuSOLVER's binding): CuPy's own call, as unrouted
        return original(*args, **kwargs)
    # Frames: location_in_stack <- _route <- the replacement <- (CuPy's code) <- the user's line
    note_routed(f"{library}{location_in_stack(sys._getframe(1))}")  # the host notes the same label
    return result


@contextmanager
def routed_cupy_libraries(fn: Any = None) -> Iterator[None]:
    """CuPy's cuBLAS and cuSOLVER calls in this thread run on cupygraph's handles meanwhile."""
    with _interception.active(_route, fn):
        yield
