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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

__all__ = ["ENV_SWITCH", "note_routed", "routing_enabled", "routing_policy"]

ENV_SWITCH = "CUPYGRAPH_ROUTE_LIBRARY_CALLS"
"""Set to 0 (false, no, off) to route nothing whatever the config says."""

_local = threading.local()


class _Policy:
    __slots__ = ("enabled", "routed")

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.routed: list[str] = []


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


def note_routed(label: str) -> None:
    """A call was routed: counted in this thread's ledger."""
    policy: Optional[_Policy] = getattr(_local, "policy", None)
    if policy is not None:
        policy.routed.append(label)
