"""Why a call runs eagerly, and the keys whose capture or replay failed.

``FailedKeys`` is the graph cache's memory of keys that cannot be graphed: it decides, from the
config's ``on_capture_error``, whether a call of such a key falls back to the function or
raises, and it keeps the decision until the cache is cleared, so a failed key is never captured
again on every call. ``run_eagerly`` is the one way a front door falls back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from ..errors import CaptureError
from ..frames import location_in_traceback, raised_through
from ..logs import logger
from ..reasons import FallbackReason, reason_of_capture_failure
from .key import GraphKey
from .padding import padding_text
from .stats import CUDAGraphStats

REFUSED = "refused"
"""The graph cannot hold an op of the function (a ``CaptureError``)."""

RAISED = "raised"
"""The function, or handling its outputs, raised something else during warm-up or capture."""


class Eager:
    """Why a call runs eagerly: the reason's code, this occurrence's detail, and for a failed
    key what failed (``REFUSED`` or ``RAISED``)."""

    __slots__ = ("detail", "failure", "padding", "reason")

    def __init__(self, reason: FallbackReason, detail: Optional[str] = None, failure: Optional[str] = None):
        self.reason, self.detail, self.failure = reason, detail, failure
        self.padding: Optional[_PaddedFailure] = None
        """A padded capture that raised, until the first eager run at the real batch tells whether the
        padding caused it (``run_eagerly``)."""

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

    def __init__(self, on_capture_error: str, pad_value: Any = 0, pad_mode: str = "constant"):
        self.raises = on_capture_error == "raise"
        self._failed: dict[GraphKey, Eager] = {}
        self._padding = padding_text(pad_value, pad_mode)
        self._edge = pad_mode == "edge"

    def check(self, key: GraphKey, name: str) -> Optional[Eager]:
        """Why ``key`` runs eagerly, or None when it may be captured; raises under raise mode."""
        failed = self._failed.get(key)
        if failed is not None and failed.failure == REFUSED and self.raises:
            raise CaptureError(f"cannot capture {name}() for {key.descriptor} (failed before; clear() "
                               f"tries again): {failed}")
        return failed

    def capture_failed(self, key: GraphKey, err: Exception, name: str, fn: Any = None, rows: int = 0) -> Eager:
        """Remember that ``key`` cannot be captured; raise (a refusal under raise) or say why it
        runs eagerly. ``fn``: the function captured; ``rows``: the call's real batch (0: unknown)."""
        if isinstance(err, CaptureError):
            reason = reason_of_capture_failure(str(err), getattr(err, "reason", None))
            why = Eager(reason, str(err), REFUSED)
        else:
            reason = FallbackReason.CAPTURE_RAISED
            raised = f"{type(err).__name__}: {err}{location_in_traceback(err)}"
            why = Eager(reason, f"{reason.text}: {raised}", RAISED)
            # The function itself raised on a padded batch: said (and counted) once an eager run at the real
            # batch tells whether the padding rows made it raise.
            if 0 < rows < key.descriptor.num_tokens and raised_through(err, fn):
                why.padding = _PaddedFailure(name, key, raised, rows, self._padding, self._edge)
        self._failed[key] = why
        if why.failure == REFUSED and self.raises:
            raise CaptureError(f"cannot capture {name}() for {key.descriptor}: {err}") from err
        if why.padding is None:
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
    if why.padding is not None:
        try:
            out = fn(*args, **kwargs)
        except BaseException:  # it fails at the real batch too: its own error, as without cupygraph
            _warn(name, why.padding.key, why)
            why.padding = None
            stats.record_fallback(why.reason, mode, why.detail)
            raise
        worked_at_real_batch(why, name)
        count_eager_run(why, name=name, stats=stats, raises=raises, mode=mode)  # (the capture raised: RAISED)
        return out
    if why.failure == RAISED and raises:
        fn(*args, **kwargs)
    count_eager_run(why, name=name, stats=stats, raises=raises, mode=mode)
    return fn(*args, **kwargs)


def worked_at_real_batch(why: Eager, name: str) -> None:
    """The function, whose capture raised on a padded batch, works at the call's real batch: the padding
    rows made it raise, and ``why`` says so (once, with what to do)."""
    padding, why.padding = why.padding, None
    if padding is not None:
        padding.blame(why)
        _warn(name, padding.key, why)


def count_eager_run(why: Eager, *, name: str, stats: CUDAGraphStats, raises: bool, mode: str = "NONE") -> None:
    """Count a call that runs (or ran) the function eagerly because of ``why``; under raise mode a key
    whose capture raised is a ``CaptureError`` naming what failed, the function having worked eagerly."""
    if why.failure == RAISED and raises:
        raise CaptureError(f"cannot capture {name}() (it works eagerly): {why}")
    stats.record_fallback(why.reason, mode, why.detail)
    logger.debug("%s runs eagerly: %s", name, why)


class _PaddedFailure:
    """A capture of a padded batch that raised: what to say if the function works at the real batch."""

    __slots__ = ("edge", "key", "name", "padding", "raised", "rows")

    def __init__(self, name: str, key: GraphKey, raised: str, rows: int, padding: str, edge: bool):
        self.name, self.key, self.raised, self.rows, self.padding = name, key, raised, rows, padding
        self.edge = edge
        """Whether the padding already repeats the last real row (``pad_mode="edge"``)."""

    def blame(self, why: Eager) -> None:
        """``why`` becomes: the padding rows made the function raise, and what to do."""
        rows = self.rows
        edge = "" if self.edge else "pad_mode='edge' (the padding repeats the last real row), "
        why.reason = FallbackReason.RAISED_ON_PADDING
        why.detail = (f"{why.reason.text}: {self.raised}, on a batch padded from {rows} to "
                      f"{self.key.descriptor.num_tokens} rows (the padding rows hold {self.padding}); at its {rows} "
                      f"real rows it works. Set {edge}a pad_value the function accepts, or add {rows} to capture_sizes")


def _warn(name: str, key: GraphKey, why: Eager) -> None:
    # The text, not the exception: a handler that keeps records (pytest, MemoryHandler)
    # would keep its traceback's frames and the static buffers they reference.
    logger.warning("cupygraph: %s() for %s runs eagerly from now on: %s", name, key.descriptor, str(why))
