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
* ``cupy_linalg``: ``cupy.linalg``'s ``eigh``, ``eigvalsh``, ``svd``, ``norm`` (ord 2, -2, 'nuc'), ``lstsq``,
  ``pinv`` and ``cholesky`` of stacked matrices, and cupyx's CSR products with a dense array, run
  cupygraph.linalg's cuSOLVER / cuSPARSE routines (``cupy_linalg_calls``) where ``linalg/routable.py``
  (the rule) has a faithful route for the arguments; ``solve``, ``inv``, ``det``, ``slogdet`` and the one
  matrix ``qr`` and ``cholesky`` are CuPy's own code, whose library calls ``cupy_libraries`` routes.
* ``numpy_linalg`` (the host reference): the same ``numpy.linalg`` calls and SciPy CSR products by the
  same rule, computed by NumPy / SciPy (with NaN for a failed matrix where the GPU's routes give it).
* ``cupy_random``: legacy ``cupy.random`` draws (``rand``, ``normal``, ``randint``, ``choice``,
  ``shuffle``, ...) from a ``cupygraph.random`` generator of the recording, seeded from CuPy's global
  state, so every replay draws fresh numbers; ``numpy_random`` is its host twin, and both route what
  ``legacy_random`` lists (their guards, which refuse the rest, hand them the calls).
* ``cupy_mask_store``: ``y[mask] = v`` of one value (CuPy's boolean-mask store reads the mask's
  count to the host) runs as ``cupy.copyto(y, v, where=mask)``; any other store is CuPy's own.

Graph-break ops of a PIECEWISE recording run eagerly, at every replay too, so nothing is routed in them
(``backends/routing.graph_break_op``). A host replay re-runs the function, routed again as its capture
was, in one place (``routing.recorded_routing`` opens ``_reopened``): its linalg calls by their router,
its legacy draws to the capture's own generator (fresh draws, as a GPU replay's).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from ..backends.guards.host_escapes import legacy_random_replayed
from ..backends.routing import LEGACY_RANDOM, Route, routing_policy

__all__ = ["routed_library_calls"]

Router = Callable[[Any], AbstractContextManager[Any]]


def _routers(backend: str) -> list[Router]:
    """The routers of one backend, imported only when a recording routes (CuPy's only with CuPy)."""
    if backend == "cupy":
        from .cupy_libraries import routed_cupy_libraries
        from .cupy_linalg import routed_linalg
        from .cupy_mask_store import routed_mask_stores
        from .cupy_random import routed_cupy_random

        return [routed_cupy_libraries, routed_linalg, routed_cupy_random, routed_mask_stores]
    if backend == "host":  # its guard lets the routed products and mask stores through (NumPy computes them);
        from .numpy_random import routed_numpy_random  # linalg gives NaN for a failure, as the GPU's routes

        return [*_replayed_routers(backend), routed_numpy_random]
    return []


def _replayed_routers(backend: str) -> list[Router]:
    """The host routers a replay opens again (its draws go to their capture's route: ``_reopened``)."""
    if backend != "host":
        return []
    from .numpy_linalg import routed_numpy_linalg

    return [routed_numpy_linalg]


@contextmanager
def routed_library_calls(fn: Any, backend: str, enabled: bool, piecewise: bool = False) -> Iterator[list[str]]:
    """Route ``fn``'s library calls in this thread meanwhile (``backend``: the recording backend's name;
    ``piecewise``: a PIECEWISE recording, whose graph-break ops are not routed); yields the ledger of the
    calls routed."""
    reopen = functools.partial(_reopened, fn, backend, enabled, piecewise)  # (a host replay's)
    with routing_policy(enabled, piecewise, reopen) as routed, ExitStack() as stack:
        if enabled:
            for router in _routers(backend):
                stack.enter_context(router(fn))
        yield routed


@contextmanager
def _reopened(fn: Any, backend: str, enabled: bool, piecewise: bool, routes: dict[str, Route]) -> Iterator[list[str]]:
    """A host replay's routing: the routers its capture opened that a replay needs again, and ``routes``,
    the capture run's routes of intercepted calls (its legacy draws' generator: fresh draws, as a GPU
    replay draws them)."""
    with routing_policy(enabled, piecewise) as routed, ExitStack() as stack:
        if enabled:
            for router in _replayed_routers(backend):
                stack.enter_context(router(fn))
        stack.enter_context(legacy_random_replayed(routes.get(LEGACY_RANDOM), fn))
        yield routed
