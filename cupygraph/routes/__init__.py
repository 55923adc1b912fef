"""Layer 4, library calls routed while a function is recorded (issue 29): CuPy code as users write it.

CuPy refuses cuBLAS, cuSOLVER, cuSPARSE and legacy cuRAND on a capturing stream. While the
warm-ups and capture run of one recording run in a thread, the routers below send those calls to
cupygraph's capture-safe implementations; every other thread keeps CuPy's own. The front door
(``cache/recording.py``) opens ``routed_library_calls`` around each recording; the switch and the
ledger of what was routed are ``backends/routing.py``'s, which the host reference reads to let
through exactly what the GPU routes.

Routers, one module each, each a context manager taking the user's function (whose module's own
names for the replaced functions are replaced too, as ``from cupy import matmul`` binds them):

* ``cupy_cublas``: CuPy's GEMMs (``@``, ``matmul``, ``dot``, ``tensordot``, ``inner``, ``einsum``,
  ``cov``, ...) reach cuBLAS through a handful of ``cupy_backends`` functions; those run on
  cupygraph's per-thread handle and workspace (``linalg/_cublas_handles.py``) with CuPy's own
  arguments, so the routed product is CuPy's product.
* ``cupy_linalg``: ``cupy.linalg``'s ``solve``, ``inv``, ``cholesky``, ``qr``, ``eigh``, ``eigvalsh``,
  ``svd``, ``det``, ``slogdet``, ``norm`` (ord 2, -2, 'nuc'), ``lstsq`` and ``pinv``, and cupyx's CSR
  products with a dense array, run cupygraph.linalg's cuSOLVER / cuSPARSE routines
  (``cupy_linalg_calls``) where ``linalg/routable.py`` (the rule) has a faithful route for the arguments.
* ``numpy_linalg`` (the host reference): the same ``numpy.linalg`` calls and SciPy CSR products by the
  same rule, computed by NumPy / SciPy, with NaN for a failed matrix as the GPU's routes give.

Graph-break ops of a PIECEWISE recording run eagerly, at every replay too, so nothing is routed in them
(``backends/routing.graph_break_op``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from ..backends.routing import routing_policy

__all__ = ["routed_library_calls"]

Router = Callable[[Any], AbstractContextManager[Any]]


def _routers(backend: str) -> list[Router]:
    """The routers of one backend, imported only when a recording routes (CuPy's only with CuPy)."""
    if backend == "cupy":
        from .cupy_cublas import routed_gemms
        from .cupy_linalg import routed_linalg

        return [routed_gemms, routed_linalg]
    if backend == "host":  # its guard lets the routed products through (NumPy computes them); linalg is
        from .numpy_linalg import routed_numpy_linalg  # routed to give NaN for a failure, as the GPU's routes

        return [routed_numpy_linalg]
    return []


@contextmanager
def routed_library_calls(fn: Any, backend: str, enabled: bool, piecewise: bool = False) -> Iterator[list[str]]:
    """Route ``fn``'s library calls in this thread meanwhile (``backend``: the recording backend's name;
    ``piecewise``: a PIECEWISE recording, whose graph-break ops are not routed); yields the ledger of the
    calls routed."""
    reopen = functools.partial(routed_library_calls, fn, backend, enabled, piecewise)  # (a host replay's)
    with routing_policy(enabled, piecewise, reopen) as routed, ExitStack() as stack:
        if enabled:
            for router in _routers(backend):
                stack.enter_context(router(fn))
        yield routed
