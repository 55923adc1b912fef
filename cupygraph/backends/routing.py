"""Library calls routed while a function is recorded (issue 29): the switch and the ledger.

CuPy refuses cuBLAS, cuSOLVER, cuSPARSE and its legacy cuRAND generator on a capturing stream, so
``x @ W`` or ``cupy.linalg.solve`` made a capture fall back. While the warm-ups and the capture run
of one recording run in a thread, ``cupygraph/routes/`` sends those calls to cupygraph's
capture-safe implementations instead, and the host reference mirrors exactly what is routed
(``guards/host_guard.py`` lets those calls through). This module holds what both sides read:

* whether routing is on in this thread: the front door opens ``routing_policy`` around each
  recording with the config's ``route_library_calls`` (``CUPYGRAPH_ROUTE_LIBRARY_CALLS=0`` turns it
  off everywhere); a backend used without a front door routes nothing, on the GPU and the host alike;
* the ledger: what was routed (``note_routed``), which the recording keeps for statistics and logs.

Neutral on purpose: backends, routes and the cache all import it; it imports nothing of cupygraph.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

__all__ = ["ENV_SWITCH", "graph_break_op", "note_routed", "recorded_routing", "routing_enabled", "routing_policy"]

ENV_SWITCH = "CUPYGRAPH_ROUTE_LIBRARY_CALLS"
"""Set to 0 (false, no, off) to route nothing whatever the config says."""

_local = threading.local()


Reopen = Callable[[], AbstractContextManager[Any]]


class _Policy:
    __slots__ = ("eager_breaks", "enabled", "reopen", "routed")

    def __init__(self, enabled: bool, eager_breaks: bool, reopen: Optional[Reopen]):
        self.enabled, self.eager_breaks, self.reopen = enabled, eager_breaks, reopen
        self.routed: list[str] = []


@contextmanager
def routing_policy(enabled: bool, piecewise: bool = False, reopen: Optional[Reopen] = None) -> Iterator[list[str]]:
    """Routing on or off in this thread meanwhile; yields the ledger of what gets routed (labels
    such as ``"cuBLAS (at model.py:12: y = x @ w)"``, once per call made). ``piecewise``: the recording
    is a PIECEWISE graph, whose graph-break ops run eagerly (``graph_break_op``). ``reopen``: routes
    the same way again (``recorded_routing``)."""
    previous: Optional[_Policy] = getattr(_local, "policy", None)
    policy = _local.policy = _Policy(enabled, piecewise, reopen)
    try:
        yield policy.routed
    finally:
        _local.policy = previous


def recorded_routing() -> Reopen:
    """What routes this thread's library calls as the recording open here does, for a replay that runs
    the function again (the host reference's: a GPU graph replays the routed calls it captured, so the
    host computes them the same way at every replay); ``nullcontext`` when no recording routes here."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    return nullcontext if policy is None or policy.reopen is None else policy.reopen


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
