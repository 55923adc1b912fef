"""Dispatch policies: whether a batch that has a graph key should replay it, and in which mode.

The keys decide what *can* be replayed; a policy decides what *should* be. ``decide`` (the one
decision, ``decision.py``) asks a policy three things, in this order:

1. ``token_limits()``, checked against the REAL batch size, before padding: batches smaller than
   ``min_tokens_for_graph`` or larger than ``max_tokens_for_graph`` run eagerly, whatever capture
   size they would pad to.
2. ``should_use_graph(key, True)`` with the padded, relaxed key graphs are looked up under
   (``BatchDescriptor(num_tokens=padded, seq_len=bucket)``), so every real batch size that replays
   the same graph shares one key (the adaptive policy's latencies are kept per key).
3. ``select_mode(key, modes)`` with the same key and the runtime modes that have a graph key.

Policies use keys exactly as passed and never pad them again.
"""

from __future__ import annotations

import math
import statistics
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

from ..config.modes import CUDAGraphMode, short_repr
from ..config.sizes import check_positive_int, outside_token_limits
from .descriptor import BatchDescriptor, check_config, check_descriptor

if TYPE_CHECKING:
    from ..config.model import CUDAGraphConfig

_GRAPH_MODES = (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE)


def runtime_modes(available_modes: Any) -> list[CUDAGraphMode]:
    """``available_modes`` (a policy's ``select_mode`` argument) as a list of modes, each parsed
    (names in any case); a single mode or a non-iterable is a TypeError naming the argument."""
    if isinstance(available_modes, (str, bytes, CUDAGraphMode)) or not isinstance(available_modes, Iterable):
        raise TypeError(f"available_modes must be a list of runtime modes (e.g. [CUDAGraphMode.FULL]), got "
                        f"{type(available_modes).__name__} {short_repr(available_modes)}")
    return [CUDAGraphMode.parse(mode) for mode in available_modes]


class DispatchPolicy(ABC):
    """Veto or steer the graph decisions of ``decide``.

    ``token_limits`` bounds the real batch size (default: none); ``should_use_graph`` is asked next
    with the padded key (False: run eagerly); then ``select_mode`` picks one of the runtime modes a
    key was found for. Returning a mode that is not available, or NONE, makes the batch run eagerly.
    """

    def token_limits(self) -> tuple[int, Optional[int]]:
        """``(min_tokens, max_tokens)`` the real (unpadded) batch size must lie within; max None: no bound."""
        return 1, None

    def within_limits(self, batch: BatchDescriptor) -> bool:
        """True when the real batch ``batch`` is within ``token_limits()``."""
        return outside_token_limits(check_descriptor(batch, "batch").num_tokens, *self.token_limits()) is None

    @abstractmethod
    def should_use_graph(self, key: BatchDescriptor, graph_available: bool) -> bool:
        """True when the batch under the padded ``key`` should replay a graph (if one is available)."""

    @abstractmethod
    def select_mode(self, key: BatchDescriptor, available_modes: Iterable[CUDAGraphMode]) -> CUDAGraphMode:
        """The runtime mode to run ``key`` in, out of ``available_modes`` (NONE: eagerly)."""


class DefaultDispatchPolicy(DispatchPolicy):
    """Use a graph when one is available and the real batch is within the token limits.

    ``min_tokens_for_graph`` / ``max_tokens_for_graph`` bound the REAL batch size (``token_limits``,
    checked by ``decide`` before padding): batches smaller than ``min_tokens_for_graph`` run eagerly,
    even where they would pad to a graph of at least that size. ``should_use_graph`` then only asks
    whether a graph is available. Prefers FULL; PIECEWISE when ``prefer_piecewise`` and a
    PIECEWISE key exists.
    """

    def __init__(
        self,
        min_tokens_for_graph: int = 1,
        max_tokens_for_graph: Optional[int] = None,
        prefer_piecewise: bool = False,
    ):
        check_positive_int(min_tokens_for_graph, "min_tokens_for_graph")
        if max_tokens_for_graph is not None:
            check_positive_int(max_tokens_for_graph, "max_tokens_for_graph")
            if max_tokens_for_graph < min_tokens_for_graph:
                raise ValueError(
                    f"max_tokens_for_graph={max_tokens_for_graph} is below "
                    f"min_tokens_for_graph={min_tokens_for_graph}"
                )
        if not isinstance(prefer_piecewise, bool):
            raise TypeError(f"prefer_piecewise must be a bool, got {type(prefer_piecewise).__name__} "
                            f"{short_repr(prefer_piecewise)}")
        self.min_tokens_for_graph = min_tokens_for_graph
        self.max_tokens_for_graph = max_tokens_for_graph
        self.prefer_piecewise = prefer_piecewise

    @classmethod
    def from_config(cls, config: CUDAGraphConfig, **kwargs: Any) -> DefaultDispatchPolicy:
        """The policy the config's ``min/max_tokens_for_graph`` and ``prefer_piecewise`` describe."""
        check_config(config)
        return cls(
            min_tokens_for_graph=config.min_tokens_for_graph,
            max_tokens_for_graph=config.max_tokens_for_graph,
            prefer_piecewise=config.prefer_piecewise,
            **kwargs,
        )

    def token_limits(self) -> tuple[int, Optional[int]]:
        return self.min_tokens_for_graph, self.max_tokens_for_graph

    def should_use_graph(self, key: BatchDescriptor, graph_available: bool) -> bool:
        check_descriptor(key, "key")
        return bool(graph_available)

    def select_mode(self, key: BatchDescriptor, available_modes: Iterable[CUDAGraphMode]) -> CUDAGraphMode:
        check_descriptor(key, "key")
        available = set(runtime_modes(available_modes))
        if self.prefer_piecewise and CUDAGraphMode.PIECEWISE in available:
            return CUDAGraphMode.PIECEWISE
        for mode in _GRAPH_MODES:
            if mode in available:
                return mode
        return CUDAGraphMode.NONE

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(min_tokens_for_graph={self.min_tokens_for_graph}, "
            f"max_tokens_for_graph={self.max_tokens_for_graph}, prefer_piecewise={self.prefer_piecewise})"
        )


class AdaptiveDispatchPolicy(DefaultDispatchPolicy):
    """The default policy, minus graph modes measured to be slower than eager for a key.

    ``record(key, mode, latency)`` keeps the last ``history_size`` latencies per key and runtime
    mode. Once a graph mode and NONE both have ``min_samples`` samples for a key, the graph mode is
    dropped for that key if its median latency is higher than eager's. Until then (and for modes
    never measured) the policy behaves like ``DefaultDispatchPolicy``.

    ``select_mode`` drops the modes measured slower, so an unmeasured alternative (PIECEWISE when
    FULL lost) is still chosen where the dispatcher offers it, and NONE where it does not.
    ``should_use_graph`` vetoes only when both FULL and PIECEWISE were measured slower: it is not
    told which modes exist for the key, and ``select_mode`` already rules out the slower ones.

    Eager samples only come from calls that ran eagerly, so a caller that wants the policy to keep
    learning should time an eager call of a key now and then (the dispatcher's
    ``record_latency`` records under the right key). Thread-safe.
    """

    def __init__(
        self,
        history_size: int = 100,
        *,
        min_samples: int = 3,
        min_tokens_for_graph: int = 1,
        max_tokens_for_graph: Optional[int] = None,
        prefer_piecewise: bool = False,
    ):
        super().__init__(min_tokens_for_graph, max_tokens_for_graph, prefer_piecewise)
        self.history_size = check_positive_int(history_size, "history_size")
        self.min_samples = check_positive_int(min_samples, "min_samples")
        if min_samples > history_size:
            raise ValueError(f"min_samples={min_samples} can never be reached with history_size={history_size}")
        self._history: dict[BatchDescriptor, dict[CUDAGraphMode, deque[float]]] = {}
        self._lock = threading.Lock()

    def record(self, key: BatchDescriptor, mode: CUDAGraphMode, latency: float) -> None:
        """Add one measured latency (any unit, the same for all calls) of ``key`` run in ``mode``."""
        check_descriptor(key, "key")
        mode = CUDAGraphMode.parse(mode)
        if not mode.valid_runtime_modes():
            raise ValueError(f"latencies are recorded per runtime mode (NONE, PIECEWISE, FULL), got {mode.name}")
        number = isinstance(latency, (int, float)) and not isinstance(latency, bool)
        if not number or not math.isfinite(latency) or latency < 0:
            raise ValueError(f"latency must be a finite, non-negative number, got {latency!r}")
        with self._lock:
            per_mode = self._history.setdefault(key, {})
            per_mode.setdefault(mode, deque(maxlen=self.history_size)).append(float(latency))

    def median_latency(self, key: BatchDescriptor, mode: CUDAGraphMode) -> Optional[float]:
        """Median of the recorded latencies of ``key`` in ``mode``; None without samples."""
        check_descriptor(key, "key")
        with self._lock:
            samples = self._history.get(key, {}).get(CUDAGraphMode.parse(mode))
            return statistics.median(samples) if samples else None

    def num_samples(self, key: BatchDescriptor, mode: CUDAGraphMode) -> int:
        check_descriptor(key, "key")
        with self._lock:
            return len(self._history.get(key, {}).get(CUDAGraphMode.parse(mode), ()))

    def _verdict(self, key: BatchDescriptor, mode: CUDAGraphMode) -> Optional[bool]:
        """True: ``mode`` measured slower than eager; False: not slower; None: too few samples."""
        per_mode = self._history.get(key)
        if not per_mode:
            return None
        eager, graph = per_mode.get(CUDAGraphMode.NONE), per_mode.get(mode)
        if eager is None or graph is None or min(len(eager), len(graph)) < self.min_samples:
            return None
        return statistics.median(graph) > statistics.median(eager)

    def slower_than_eager(self, key: BatchDescriptor, mode: CUDAGraphMode) -> bool:
        """True once ``mode`` has been measured slower than eager for ``key``."""
        check_descriptor(key, "key")
        with self._lock:
            return self._verdict(key, CUDAGraphMode.parse(mode)) is True

    def should_use_graph(self, key: BatchDescriptor, graph_available: bool) -> bool:
        if not super().should_use_graph(key, graph_available):
            return False
        with self._lock:
            return not all(self._verdict(key, mode) is True for mode in _GRAPH_MODES)

    def select_mode(self, key: BatchDescriptor, available_modes: Iterable[CUDAGraphMode]) -> CUDAGraphMode:
        check_descriptor(key, "key")
        available = runtime_modes(available_modes)
        with self._lock:
            kept = [m for m in available if m in _GRAPH_MODES and self._verdict(key, m) is not True]
        return super().select_mode(key, kept)

    def reset(self) -> None:
        """Forget every recorded latency."""
        with self._lock:
            self._history.clear()
