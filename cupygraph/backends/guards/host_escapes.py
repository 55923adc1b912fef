"""NumPy functions a host capture run refuses although no method of ``CaptureArray`` sees them.

* NumPy's legacy ``np.random.*`` functions (the global ``RandomState``): their CuPy counterparts,
  ``cupy.random.*``, call cuRAND's host API, which CuPy cannot capture. With routing on, the calls
  the GPU routes (``routes/legacy_random.py``) go to the recording's host router
  (``routes/numpy_random.py``) instead, in the warm-ups and the capture run; the replays of a
  recording that routed some route them again (``legacy_random_replayed``), so each replay draws
  fresh numbers from the recording's generator, as the GPU graph does. The rest stays refused, as
  ``guards/cupy_legacy_random.py`` refuses it on the GPU, and ``seed`` with it.
* SciPy sparse products (``csr @ x``, ``csr.dot(x)``; when SciPy is imported): their GPU
  counterparts in ``cupyx.scipy.sparse`` run cuSPARSE, which CuPy cannot capture.
* SciPy's dense solvers (``scipy.linalg.solve``, ``inv``, ``cholesky``, ...): their cupyx
  counterparts run cuSOLVER/cuBLAS, which CuPy cannot capture.

While a capture run is active in any thread, those names are wrappers (``uploads.Interception``)
that refuse in a capturing thread and pass through everywhere else; the last run to end puts the
originals back. Code that bound a name before (``from numpy.random import rand``), and methods of
a ``RandomState`` the function holds, are not caught.

``np.asarray(x)`` and the other array creators are not refused: they mirror ``cupy.asarray``, a
no-op on a device array. ``host_uploads.py`` keeps their result a ``CaptureArray`` (so a later
``float()`` of it is refused) and treats them on host data as uploads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

import numpy as np

from ...frames import called_from_user
from ...reasons import FallbackReason
from ..base import ReplayMismatch
from ..routing import LEGACY_RANDOM, NotRouted, Route, route_or_refuse
from .host_refusal import capture_run_active, refuse
from .uploads import Interception

_RANDOM_HINT = ("NumPy's legacy global generator, whose GPU counterpart cupy.random calls cuRAND's host API, which "
                "CuPy cannot capture; use cupygraph.random.default_rng(seed), which captures")


def _legacy_random_names() -> list[str]:
    """The ``np.random`` functions that draw from (or seed) the legacy global ``RandomState``."""
    state = np.random.mtrand._rand
    names = [name for name in dir(np.random) if getattr(getattr(np.random, name), "__self__", None) is state]
    return names + [name for name in ("seed", "ranf", "sample") if hasattr(np.random, name)]


def _caller_is_user(skip_scipy: bool = False) -> bool:
    """Whether the intercepted call came from the user's code (frames: this <- handler <- the
    replacement <- the caller); with ``skip_scipy``, the first frame outside SciPy decides, since
    cupygraph's own host spmm multiplies sparse matrices too and must not be refused."""
    return called_from_user(3, "scipy" if skip_scipy else "")


_SPARSE_HINT = ("a SciPy sparse product, whose GPU counterpart (cupyx.scipy.sparse) runs cuSPARSE, which CuPy "
                "cannot capture; use cupygraph.linalg.spmm(csr, dense) or spmm(dense, csr), which capture")
_SCIPY_LINALG = ("solve", "inv", "det", "lstsq", "pinv", "lu", "lu_factor", "lu_solve", "cholesky", "cho_factor",
                 "cho_solve", "qr", "svd", "eigh", "eig", "eigvalsh", "solve_triangular", "expm")
_SCIPY_LINALG_HINT = "runs LAPACK here and cuSOLVER/cuBLAS in its cupyx counterpart, which CuPy cannot capture"
"""(The replacement that captures, where one exists, is named from ``hints`` by the routine's name.)"""


def _targets() -> list[tuple[Any, str, str]]:
    """Legacy ``np.random``, and SciPy's sparse products and dense solvers where SciPy is in use (it
    is never imported here)."""
    targets = [(np.random, name, f"np.random.{name}") for name in _legacy_random_names()]
    base = getattr(sys.modules.get("scipy.sparse._base"), "_spbase", None)
    if base is not None:
        targets += [(base, name, "sparse") for name in ("_matmul_dispatch", "_rmatmul_dispatch") if name in vars(base)]
    linalg = sys.modules.get("scipy.linalg")
    if linalg is not None:
        targets += [(linalg, name, f"scipy.linalg.{name}") for name in _SCIPY_LINALG if hasattr(linalg, name)]
    return targets


def _refuse_escape(label: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if capture_run_active():
        if label.startswith("np.random.") and _caller_is_user():
            # The capture run's draws: its replays route them again (``routing.recorded_routing``).
            return _routed_or_refused(label, args, kwargs, replayed=True)
        if label == "sparse" and _caller_is_user(skip_scipy=True):
            refuse(FallbackReason.LIBRARY_CALL, _SPARSE_HINT)
        if label.startswith("scipy.linalg.") and _caller_is_user():
            refuse(FallbackReason.LIBRARY_CALL, f"{label} {_SCIPY_LINALG_HINT}", label)
    return original(*args, **kwargs)


def _routed_or_refused(label: str, args: tuple[Any, ...], kwargs: dict[str, Any], replayed: bool = False) -> Any:
    """A legacy draw from the user's code: what the GPU routes is routed, the rest refused as the GPU
    refuses it (``cupy_legacy_random``), with why it was not routed where routing is on."""
    try:
        return route_or_refuse(LEGACY_RANDOM, label, args, kwargs, replayed)
    except NotRouted as why:
        unrouted = f" (not routed: {why})" if str(why) else ""
    refuse(FallbackReason.LIBRARY_CALL, f"{label}{unrouted} uses {_RANDOM_HINT}")


def _refuse_legacy_random(label: str, original: Callable[..., Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
    if label.startswith("np.random.") and _caller_is_user():
        return _routed_or_refused(label, args, kwargs)
    return original(*args, **kwargs)


_interception = Interception(_targets)


@contextmanager
def numpy_escapes_refused(fn: Any = None) -> Iterator[None]:
    """The refusing wrappers in place for this thread's capture run of ``fn`` (other threads: the
    originals), its module's own names for them included."""
    with _interception.active(_refuse_escape, fn):
        yield


@contextmanager
def legacy_random_refused(fn: Any = None) -> Iterator[None]:
    """The warm-ups: legacy ``np.random`` routed or refused before it draws (the rest runs as it is). The
    global state a warm-up drew from could be restored here, but not on the GPU (``cupy_legacy_random``):
    the reference refuses where the GPU does, and the call's own draws are its eager run's."""
    with _interception.active(_refuse_legacy_random, fn):
        yield


def legacy_random_replayed(route: Optional[Route], fn: Any = None) -> AbstractContextManager[None]:
    """A replay of a recording whose capture run routed legacy draws to ``route``: the replay's draws are
    routed there again (a context manager; nothing to do without a route)."""
    if route is None:
        return nullcontext()
    return _interception.active(_Replayer(route), fn)


class _Replayer:
    def __init__(self, route: Route):
        self.route = route

    def __call__(self, label: str, original: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
        if not (label.startswith("np.random.") and _caller_is_user()):
            return original(*args, **kwargs)
        try:
            return self.route(label, args, kwargs)
        except NotRouted as why:  # the replay took another path than the capture run
            raise ReplayMismatch(f"the replay called {label}, which the capture run did not route "
                                 f"({why or 'no route'}); a GPU graph replays what its capture run did") from None
