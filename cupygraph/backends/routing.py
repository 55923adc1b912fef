"""Library calls routed while a function is recorded (issue 29): the switch and the ledger.

CuPy refuses cuBLAS, cuSOLVER, cuSPARSE and its legacy cuRAND generator on a capturing stream, so
``x @ W`` or ``cupy.linalg.solve`` made a capture fall back. While the warm-ups and the capture run
of one recording run in a thread, ``cupygraph/routes/`` sends those calls to cupygraph's
capture-safe implementations instead, and the host reference mirrors exactly what is routed
(``guards/host_guard.py`` lets those calls through). This module holds what both sides read:

* whether routing is on in this thread: the front door opens ``routing_policy`` around each
  recording with the config's ``route_library_calls`` (``CUPYGRAPH_ROUTE_LIBRARY_CALLS=0`` turns it
  off everywhere); a backend used without a front door routes nothing, on the GPU and the host alike;
* the ledger: what was routed (``note_routed``), which the recording keeps for statistics and logs;
* the routers of calls a guard would otherwise refuse (``routing_to`` / ``route_or_refuse``): legacy
  ``cupy.random`` / ``np.random`` draws are intercepted by their guard (``guards/cupy_legacy_random.py``,
  ``guards/host_escapes.py``), which owns the refusal and asks here whether a router takes the call.

The rule both sides apply to a routed boolean-mask store is ``mask_stores.py``'s.

Neutral on purpose: backends, routes and the cache all import it; it imports nothing of cupygraph.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

__all__ = ["ENV_SWITCH", "LEGACY_RANDOM", "NotRouted", "Route", "note_routed", "route_for", "route_or_refuse",
           "routing_enabled", "routing_policy", "routing_suspended", "routing_to"]

ENV_SWITCH = "CUPYGRAPH_ROUTE_LIBRARY_CALLS"
"""Set to 0 (false, no, off) to route nothing whatever the config says."""

_local = threading.local()


LEGACY_RANDOM = "legacy_random"
"""The kind of the legacy global generators' module functions (``cupy.random.rand``, ``np.random.rand``)."""

Route = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
"""A router of intercepted calls: ``(label, args, kwargs) -> result``; raises ``NotRouted`` for a call it
has no faithful route for."""


class NotRouted(Exception):
    """A call no router takes: the guard refuses it; the message says why (empty: nothing routes it)."""


class _Policy:
    __slots__ = ("enabled", "routed", "routes")

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.routed: list[str] = []
        self.routes: dict[str, Route] = {}


@contextmanager
def routing_policy(enabled: bool) -> Iterator[list[str]]:
    """Routing on or off in this thread meanwhile; yields the ledger of what gets routed (labels
    such as ``"cupy.matmul (cublasGemmEx)"``, once per call made)."""
    previous: Optional[_Policy] = getattr(_local, "policy", None)
    policy = _local.policy = _Policy(enabled)
    try:
        yield policy.routed
    finally:
        _local.policy = previous


def routing_enabled() -> bool:
    """Whether library calls are routed in this thread now (False outside a front door's recording)."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    return policy is not None and policy.enabled


@contextmanager
def routing_suspended() -> Iterator[None]:
    """Nothing routed in this thread meanwhile: an op that also runs eagerly, as it is, at every replay (a
    graph break between PIECEWISE pieces) runs CuPy's own calls at capture too, so the recording holds no
    library state for it."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is None or not policy.enabled:
        yield
        return
    policy.enabled = False
    try:
        yield
    finally:
        policy.enabled = True


def note_routed(label: str) -> None:
    """A call was routed: counted in this thread's ledger."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is not None:
        policy.routed.append(label)


@contextmanager
def routing_to(kind: str, route: Route) -> Iterator[None]:
    """The calls of ``kind`` that a guard intercepts go to ``route`` in this thread meanwhile (a router opens
    it inside the recording's ``routing_policy``; without an enabled policy nothing is routed)."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is None or not policy.enabled:
        yield
        return
    previous = policy.routes.get(kind)
    policy.routes[kind] = route
    try:
        yield
    finally:
        if previous is None:
            policy.routes.pop(kind, None)
        else:
            policy.routes[kind] = previous


def route_for(kind: str) -> Optional[Route]:
    """This thread's router of ``kind`` while routing is on, else None."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    return policy.routes.get(kind) if policy is not None and policy.enabled else None


def route_or_refuse(kind: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The guard's question: the routed call's result, or ``NotRouted`` (why, or "" where nothing routes
    ``kind`` now: routing off, or no router), which the guard turns into its refusal."""
    route = route_for(kind)
    if route is None:
        raise NotRouted("")
    return route(label, args, kwargs)
