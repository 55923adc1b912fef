"""CuPy's products routed to cupygraph's cuBLAS handles while a function is recorded (issue 29).

Every CuPy product that reaches cuBLAS (``x @ W``, ``cupy.matmul``, ``dot``, ``ndarray.dot``,
``tensordot``, ``inner``, ``einsum``, ``cov``, ``asfortranarray`` of a matrix, ...) does it through
a few functions of ``cupy_backends.cuda.libs.cublas``, which CuPy looks up on that module at every
call (``cupy/_core/_routines_linalg.pyx`` imports it inside each function). Those functions refuse a
capturing stream (their ``setStream`` raises), which made such a function fall back.

While a recording runs in a thread, each of them is replaced (``uploads.Interception``: every other
thread keeps CuPy's own): CuPy's handle is set aside, and the call runs with CuPy's own arguments on
cupygraph's handle of this thread, bound to the current stream and that stream's own workspace
(``linalg/cublas_calls.py``: nothing is allocated during the capture, and the graph holds the
handle and workspace it captured with). Same routine, operands, layouts, transposes, scalars, compute
type and algorithm choice as CuPy's: the routed product is the one CuPy computes. Bit for bit where
cuBLAS picks the same kernel on both handles; it may choose by the workspace it has, and ours is
cuBLAS's default size (32 MiB on Hopper, 4 MiB before), so they agree (``tests/gpu/test_routes_gpu.py``
checks it on the GPU).

Integer products never reach cuBLAS (CuPy's own kernels capture as they are), nor do products of
one element (a reduction kernel).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..backends.guards.uploads import Interception
from ..backends.routing import note_routed, routing_enabled
from ..frames import location_in_stack
from ..linalg.cublas_calls import CUPY_CUBLAS_CALLS, run_as_cupy_would

__all__ = ["routed_gemms"]


def _targets() -> list[tuple[Any, str, str]]:
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # a stand-in for CuPy (the test suite's fakes): it reaches no cuBLAS to route
        return []
    return [(cublas, name, name) for name in CUPY_CUBLAS_CALLS if hasattr(cublas, name)]


_interception = Interception(_targets)


def _route(name: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # CuPy passes every argument by position (anything else is not CuPy's call); a graph-break op of a
    # PIECEWISE recording runs CuPy's own, as at its replays (``backends/routing.graph_break_op``).
    if kwargs or not args or not routing_enabled():
        return original(*args, **kwargs)
    run_as_cupy_would(name, args)
    # Frames: location_in_stack <- _route <- the replacement <- (CuPy's compiled code) <- the user's line
    note_routed(f"cuBLAS{location_in_stack(sys._getframe(1))}")  # the host notes the same label
    return None


@contextmanager
def routed_gemms(fn: Any = None) -> Iterator[None]:
    """CuPy's cuBLAS calls in this thread run on cupygraph's handles meanwhile."""
    with _interception.active(_route, fn):
        yield
