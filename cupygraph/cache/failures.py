"""Why a call runs eagerly, and the keys whose capture or replay failed.

``FailedKeys`` is the graph cache's memory of keys that cannot be graphed: it decides, from the
config's ``on_capture_error``, whether a call of such a key falls back to the function or
raises, and it keeps the decision until the cache is cleared, so a failed key is never captured
again on every call. ``run_eagerly`` is the one way a front door falls back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from ..errors import CaptureError
from ..frames import location_in_traceback
from ..reasons import FallbackReason, reason_of_capture_failure
from .key import GraphKey
from .stats import CUDAGraphStats

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


def cold_key(seen: int, capture_after: int) -> Eager:
    return Eager(FallbackReason.COLD_KEY, f"cold key: seen {seen} of capture_after={capture_after} times")


class FailedKeys:
    """The keys of one graph cache that run eagerly (or raise) because their graph failed.

    Not locked: the cache holds its lock around every call. ``name`` in each call is the
    function's name, for messages.
    """

    def __init__(self, on_capture_error: str):
        self.raises = on_capture_error == "raise"
        self._failed: dict[GraphKey, Eager] = {}

    def check(self, key: GraphKey, name: str) -> Optional[Eager]:
        """Why ``key`` runs eagerly, or None when it may be captured; raises under raise mode."""
        failed = self._failed.get(key)
        if failed is not None and failed.failure == REFUSED and self.raises:
            raise CaptureError(f"cannot capture {name}() for {key.descriptor} (failed before; clear() "
                               f"tries again): {failed}")
        return failed

    def capture_failed(self, key: GraphKey, err: Exception, name: str) -> Eager:
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
            raise CaptureError(f"cannot capture {name}() for {key.descriptor}: {err}") from err
        _warn(name, key, why)
        return why

    def replay_failed(self, key: GraphKey, err: CaptureError, name: str) -> Eager:
        """A replay returned other outputs than the capture: the key runs eagerly from now on."""
        why = Eager(FallbackReason.REPLAY_MISMATCH, str(err), REFUSED)
        self._failed[key] = why
        if self.raises:
            raise CaptureError(f"cannot replay {name}() for {key.descriptor}: {err}") from err
        _warn(name, key, why)
        return why

    def clear(self) -> None:
        self._failed.clear()


def run_eagerly(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], why: Eager, *,
    name: str, stats: CUDAGraphStats, raises: bool, mode: str = "NONE",
) -> Any:
    """Call ``fn`` as it is, counted as a fallback with ``why``.

    A key whose capture raised runs the function on the caller's arrays: a bug in it raises its
    own exception here, as without cupygraph. Under raise mode (``raises``) a function that works
    eagerly then gets a ``CaptureError`` naming what failed at capture.
    """
    if why.failure == RAISED and raises:
        fn(*args, **kwargs)
    count_eager_run(why, name=name, stats=stats, raises=raises, mode=mode)
    return fn(*args, **kwargs)


def count_eager_run(why: Eager, *, name: str, stats: CUDAGraphStats, raises: bool, mode: str = "NONE") -> None:
    """Count a call that runs (or ran) the function eagerly because of ``why``; under raise mode a key
    whose capture raised is a ``CaptureError`` naming what failed, the function having worked eagerly."""
    if why.failure == RAISED and raises:
        raise CaptureError(f"cannot capture {name}() (it works eagerly): {why}")
    stats.record_fallback(why.reason, mode, why.detail)
    logger.debug("%s runs eagerly: %s", name, why)


def _warn(name: str, key: GraphKey, why: Eager) -> None:
    # The text, not the exception: a handler that keeps records (pytest, MemoryHandler)
    # would keep its traceback's frames and the static buffers they reference.
    logger.warning("cupygraph: %s() for %s runs eagerly from now on: %s", name, key.descriptor, str(why))
