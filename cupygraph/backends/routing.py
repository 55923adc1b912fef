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

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

__all__ = ["ENV_SWITCH", "LEGACY_RANDOM", "NotRouted", "Reopen", "Reopener", "Route", "graph_break_op", "note_routed",
           "recorded_routing", "route_for", "route_or_refuse", "routing_enabled", "routing_policy", "routing_to"]

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


Reopen = Callable[[], AbstractContextManager[Any]]
Reopener = Callable[[dict[str, Route]], AbstractContextManager[Any]]
"""Opens routing again for a replay, with the routes of the kinds its capture run routed."""


class _Policy:
    __slots__ = ("eager_breaks", "enabled", "reopen", "replayed", "routed", "routes")

    def __init__(self, enabled: bool, eager_breaks: bool, reopen: Optional[Reopener]):
        self.enabled, self.eager_breaks, self.reopen = enabled, eager_breaks, reopen
        self.routed: list[str] = []
        self.routes: dict[str, Route] = {}
        self.replayed: set[str] = set()
        """The kinds of intercepted calls the capture run routed, which a host replay routes again."""


@contextmanager
def routing_policy(enabled: bool, piecewise: bool = False, reopen: Optional[Reopener] = None) -> Iterator[list[str]]:
    """Routing on or off in this thread meanwhile; yields the ledger of what gets routed (labels
    such as ``"cuBLAS (at model.py:12: y = x @ w)"``, once per call made). ``piecewise``: the recording
    is a PIECEWISE graph, whose graph-break ops run eagerly (``graph_break_op``). ``reopen``: routes
    the same way again, given the routes the capture run used (``recorded_routing``)."""
    previous: Optional[_Policy] = getattr(_local, "policy", None)
    policy = _local.policy = _Policy(enabled, piecewise, reopen)
    try:
        yield policy.routed
    finally:
        _local.policy = previous


def recorded_routing() -> Reopen:
    """What routes this thread's library calls as the recording open here does, for a replay that runs
    the function again (the host reference's: a GPU graph replays the routed calls it captured, so the
    host computes them the same way at every replay, its routed draws from the same generator);
    ``nullcontext`` when no recording routes here. The one owner of how a host replay routes."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is None or policy.reopen is None:
        return nullcontext
    return functools.partial(policy.reopen, {kind: policy.routes[kind] for kind in policy.replayed
                                             if kind in policy.routes})


def routing_enabled() -> bool:
    """Whether library calls are routed in this thread now (False outside a front door's recording)."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    return policy is not None and policy.enabled


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


def route_or_refuse(kind: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                    replayed: bool = False) -> Any:
    """The guard's question: the routed call's result, or ``NotRouted`` (why, or "" where nothing routes
    ``kind`` now: routing off, or no router), which the guard turns into its refusal. ``replayed``: a call
    of the host's capture run, whose replays route ``kind`` again (``recorded_routing``)."""
    route = route_for(kind)
    if route is None:
        raise NotRouted("")
    result = route(label, args, kwargs)
    if replayed:
        _local.policy.replayed.add(kind)
    return result


@contextmanager
def graph_break_op() -> Iterator[None]:
    """A ``graph_break`` op runs in this thread meanwhile. In a PIECEWISE recording it runs eagerly, and
    so at every replay, where nothing is routed: it is not routed in the recording either, so the warm-ups
    and the capture run compute it as the replays will (a routed ``cupy.linalg.inv`` gives NaN where
    CuPy's own gives other values or NumPy's raises). In FULL mode the op is captured with the rest, and
    routed like the rest."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is None or not policy.eager_breaks or not policy.enabled:
        yield
        return
    policy.enabled = False
    try:
        yield
    finally:
        policy.enabled = True
