"""Layer 4, library calls routed while a function is recorded (issue 29): CuPy code as users write it.

CuPy refuses cuBLAS, cuSOLVER, cuSPARSE and legacy cuRAND on a capturing stream. While the
warm-ups and capture run of one recording run in a thread, the routers below send those calls to
cupygraph's capture-safe implementations; every other thread keeps CuPy's own. The front door
(``cache/recording.py``) opens ``routed_library_calls`` around each recording; the switch and the
ledger of what was routed are ``backends/routing.py``'s, which the host reference reads to let
through exactly what the GPU routes.

Routers, one module each, each a context manager taking the user's function (whose module's own
names for the replaced functions are replaced too, as ``from cupy import matmul`` binds them):

* ``cupy_libraries``: CuPy's products (``@``, ``matmul``, ``dot``, ``tensordot``, ``inner``, ``einsum``,
  ``cov``, ...) and ``cupy.linalg``'s factorisations (``solve``, ``inv``, ``cholesky``, ``qr``, ``det``,
  ``slogdet``) reach cuBLAS and cuSOLVER through ``cupy_backends`` functions; those run on
  cupygraph's per-thread handles with CuPy's own arguments, so the routed result is CuPy's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from ..backends.routing import routing_policy

__all__ = ["routed_library_calls"]

Router = Callable[[Any], AbstractContextManager[Any]]


def _routers(backend: str) -> list[Router]:
    """The routers of one backend, imported only when a recording routes (CuPy's only with CuPy)."""
    if backend == "cupy":
        from .cupy_libraries import routed_cupy_libraries

        return [routed_cupy_libraries]
    return []  # the host reference runs NumPy, which needs no route: its guard lets the routed calls through


@contextmanager
def routed_library_calls(fn: Any, backend: str, enabled: bool) -> Iterator[list[str]]:
    """Route ``fn``'s library calls in this thread meanwhile (``backend``: the recording backend's name);
    yields the ledger of the calls routed."""
    with routing_policy(enabled) as routed, ExitStack() as stack:
        if enabled:
            for router in _routers(backend):
                stack.enter_context(router(fn))
        yield routed
