"""Why a call of a jitted function runs eagerly, and the keys whose capture or replay failed.

The one place that decides, for a key that cannot be graphed, whether a call falls back to the
function or raises (``on_capture_error``), and that remembers the decision until ``clear()``:
a failed key is never captured again on every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from .backends.base import ReplayMismatch
from .entry import CUDAGraphEntry
from .errors import CaptureError
from .frames import location_in_traceback
from .key import GraphKey
from .reasons import EvictionReason, FallbackReason, reason_of_capture_failure

logger = logging.getLogger("cupygraph")

REFUSED = "refused"
"""The graph cannot hold an op of the function (a ``CaptureError``)."""

RAISED = "raised"
"""The function, or handling its outputs, raised something else during warm-up or capture."""


class Eager:
    """Why a call runs eagerly: the reason's code, this occurrence's detail, and for a failed
    key what failed (``REFUSED`` or ``RAISED``)."""

    __slots__ = ("detail", "failure", "reason")

    def __init__(self, reason: FallbackReason, detail: Optional[str] = None, failure: Optional[str] = None):
        self.reason, self.detail, self.failure = reason, detail, failure

    def __str__(self) -> str:
        return self.reason.describe(self.detail)


MODE_NONE = Eager(FallbackReason.MODE_NONE)
EMPTY_BATCH = Eager(FallbackReason.EMPTY_BATCH)


class FailedKeys:
    """The keys of one jitted function that run eagerly (or raise) because their graph failed."""

    def __init__(self, name: str, on_capture_error: str, registry: Any):
        self.name, self.raises, self.registry = name, on_capture_error == "raise", registry
        self._failed: dict[GraphKey, Eager] = {}

    def check(self, key: GraphKey) -> Optional[Eager]:
        """Why ``key`` runs eagerly, or None when it may be captured; raises under raise mode."""
        failed = self._failed.get(key)
        if failed is not None and failed.failure == REFUSED and self.raises:
            raise CaptureError(f"cannot capture {self.name}() for {key.descriptor} (failed before; clear() "
                               f"tries again): {failed}")
        return failed

    def capture_failed(self, key: GraphKey, err: Exception) -> Eager:
        """Remember that ``key`` cannot be captured; raise (a refusal under raise) or say why it
        runs eagerly."""
        if isinstance(err, CaptureError):
            reason = reason_of_capture_failure(str(err), getattr(err, "reason", None))
            why = Eager(reason, str(err), REFUSED)
        else:
            reason = FallbackReason.CAPTURE_RAISED
            why = Eager(reason, f"{reason.text}: {type(err).__name__}: {err}{location_in_traceback(err)}", RAISED)
        self._failed[key] = why
        if why.failure == REFUSED and self.raises:
            raise CaptureError(f"cannot capture {self.name}() for {key.descriptor}: {err}") from err
        self._warn(key, why)
        return why

    def replay_failed(self, entry: CUDAGraphEntry, err: ReplayMismatch) -> Eager:
        """A replay returned other outputs than the capture: drop the graph, run the key eagerly."""
        why = Eager(FallbackReason.REPLAY_MISMATCH, str(err), REFUSED)
        self._failed[entry.key] = why
        self.registry.evict(entry.key, EvictionReason.FAILED_REPLAY, str(err))
        if self.raises:
            raise CaptureError(f"cannot replay {self.name}() for {entry.key.descriptor}: {err}") from err
        self._warn(entry.key, why)
        return why

    def run_eagerly(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], why: Eager,
                    mode: str = "NONE") -> Any:
        """Call ``fn`` as it is, counted as a fallback with ``why``.

        A key whose capture raised runs the function on the caller's arrays: a bug in it raises
        its own exception here, as without jit. Under raise mode a function that works eagerly
        then gets a ``CaptureError`` naming what failed at capture.
        """
        if why.failure == RAISED and self.raises:
            fn(*args, **kwargs)
            raise CaptureError(f"cannot capture {self.name}() (it works eagerly): {why}")
        self.registry.stats().record_fallback(why.reason, mode, why.detail)
        logger.debug("%s runs eagerly: %s", self.name, why)
        return fn(*args, **kwargs)

    def clear(self) -> None:
        self._failed.clear()

    def _warn(self, key: GraphKey, why: Eager) -> None:
        # The text, not the exception: a handler that keeps records (pytest, MemoryHandler)
        # would keep its traceback's frames and the static buffers they reference.
        logger.warning("cupygraph: %s() for %s runs eagerly from now on: %s", self.name, key.descriptor, str(why))
