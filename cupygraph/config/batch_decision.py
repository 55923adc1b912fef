"""Where the config's ``should_use_cudagraph`` and ``get_padded_batch_size`` find the one decision.

The decision (``dispatch/decision.py``) lives above the config (it reads the config) and installs
itself here when imported, so the config imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

_BATCH_DECISION: Optional[Callable[..., Any]] = None
"""``dispatch.decision.decide_batch_size``: the one decision lives above the config (it reads the
config) and installs itself here when imported, so this module imports nothing above it."""

_PADDED_SIZE: Optional[Callable[..., Optional[int]]] = None
"""``dispatch.decision.padded_batch_size``: where a uniform-decode batch pads (its own ladder)."""


def install_batch_decision(
    decide_batch_size: Callable[..., Any], padded_batch_size: Callable[..., Optional[int]]
) -> None:
    """Called once by ``cupygraph.dispatch.decision``: the functions ``should_use_cudagraph`` and
    ``get_padded_batch_size`` ask."""
    global _BATCH_DECISION, _PADDED_SIZE
    _BATCH_DECISION, _PADDED_SIZE = decide_batch_size, padded_batch_size


def installed() -> tuple[Callable[..., Any], Callable[..., Optional[int]]]:
    if _BATCH_DECISION is None or _PADDED_SIZE is None:
        raise RuntimeError("cupygraph.dispatch.decision is not imported; import cupygraph first")
    return _BATCH_DECISION, _PADDED_SIZE
