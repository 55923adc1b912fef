"""Runtime dispatch: the keys graphs serve, and per batch the one decision made with them (vLLM v1)."""

from __future__ import annotations

import dataclasses
import logging
import numbers
import threading
from collections.abc import Iterator
from typing import Any, Optional

from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..config.modes import short_repr
from ..logs import logger
from ..reasons import FallbackReason
from .decision import RUNTIME_GRAPH_MODES, Decision, DispatchKeys, decide, padded_descriptor
from .descriptor import BatchDescriptor, check_config, check_descriptor
from .policy import DefaultDispatchPolicy, DispatchPolicy
from .stats import DispatchStats

_ABOVE_LARGEST = (FallbackReason.ABOVE_LARGEST, FallbackReason.SEQ_LEN_ABOVE_LARGEST)


class Dispatcher:
    """Keys per runtime mode (FULL, PIECEWISE) and, per batch, the decision ``decide`` makes with them.

    Follows vLLM's v1 ``CudagraphDispatcher``:

    1. ``cudagraph_keys`` holds one set of ``BatchDescriptor`` per runtime graph mode; the keys are
       the only source of truth for what can be captured or replayed. ``initialize_cudagraph_keys``
       fills them from the config's capture sizes (and ``seq_len_buckets``); until it has run,
       every batch dispatches to NONE.
    2. ``decide`` (and vLLM's ``dispatch``, the same decision as a ``(mode, descriptor)`` pair)
       asks ``decision.decide`` with these keys and this dispatcher's policy: padding to the
       capture size and seq_len bucket, token limits on the real batch size, the exact FULL key,
       the relaxed FULL key, the relaxed PIECEWISE key (cascade attention rules FULL out), then the
       policy's veto and choice. See ``decision.py`` for the rules.

    This class owns the keys and the decision; the seed's graph-cache surface (``register_graph``,
    ``has_graph``, ``clear_cache``...) is ``cupygraph.compat.dispatcher.CudagraphDispatcher``.

    Contract: the dispatcher only decides. It owns no buffers; callers trust the returned
    descriptor to capture or replay (mode FULL/PIECEWISE) or run eagerly (NONE). Without
    ``seq_len_buckets`` the sequence length is not part of the key and is dropped. Thread-safe.
    """

    def __init__(
        self,
        config: Optional[CUDAGraphConfig] = None,
        policy: Optional[DispatchPolicy] = None,
    ):
        self.config = CUDAGraphConfig() if config is None else check_config(config)
        if policy is not None and not isinstance(policy, DispatchPolicy):
            raise TypeError(f"policy must be a DispatchPolicy (DefaultDispatchPolicy, AdaptiveDispatchPolicy or a "
                            f"subclass) or None, got {type(policy).__name__} {short_repr(policy)}")
        self.policy = policy if policy is not None else DefaultDispatchPolicy.from_config(self.config)
        self.keys = DispatchKeys(self.config.mode, self.config.uniform_decode_query_len)
        self.dispatch_stats = DispatchStats()
        self._lock = threading.RLock()

    # -- keys ----------------------------------------------------------------------------------

    @property
    def cudagraph_keys(self) -> dict[CUDAGraphMode, set[BatchDescriptor]]:
        """vLLM's key table: one set of ``BatchDescriptor`` per runtime graph mode."""
        return self.keys.by_mode

    @property
    def keys_initialized(self) -> bool:
        return self.keys.initialized

    @property
    def cudagraph_mode(self) -> CUDAGraphMode:
        """The mode the keys were made for (the config's until ``initialize_cudagraph_keys``)."""
        return self.keys.mode

    @property
    def uniform_decode_query_len(self) -> int:
        return self.keys.uniform_decode_query_len

    def add_cudagraph_key(self, runtime_mode: CUDAGraphMode, batch_descriptor: BatchDescriptor) -> None:
        with self._lock:
            self.keys.add(runtime_mode, batch_descriptor)

    def initialize_cudagraph_keys(self, cudagraph_mode: CUDAGraphMode, uniform_decode_query_len: int) -> None:
        """Add the keys ``cudagraph_mode`` captures (see ``DispatchKeys.initialize``)."""
        with self._lock:
            self.keys.initialize(self.config, cudagraph_mode, uniform_decode_query_len)

    # -- dispatch ------------------------------------------------------------------------------

    def policy_key(self, batch_descriptor: BatchDescriptor) -> Optional[BatchDescriptor]:
        """The padded, relaxed key policies see for this batch; None when it is above the largest."""
        check_descriptor(batch_descriptor, "batch_descriptor")
        with self._lock:
            padded = padded_descriptor(self.config, batch_descriptor, self.keys)
        return None if padded is None else padded.relaxed()

    def decide(self, batch_descriptor: BatchDescriptor, use_cascade_attn: bool = False, *,
               count: bool = True) -> Decision:
        """The decision for this real (unpadded) batch: runtime mode, padded descriptor, or why eager.

        Counted in ``dispatch_stats`` unless ``count`` is False (a query that runs nothing).
        """
        check_descriptor(batch_descriptor, "batch_descriptor")
        with self._lock:
            decision = decide(self.config, batch_descriptor, self.keys, self.policy, use_cascade_attn)
            if count:
                self._count(batch_descriptor, decision)
        if decision.reason is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug("dispatch %s: %s; eager", batch_descriptor, decision.reason.describe(decision.detail))
        return decision

    def dispatch(
        self, batch_descriptor: BatchDescriptor, use_cascade_attn: bool = False
    ) -> tuple[CUDAGraphMode, Optional[BatchDescriptor]]:
        """The runtime mode and the padded descriptor to capture/replay under, or (NONE, None).

        The descriptor returned may be more general than the input (a uniform batch dispatched
        to a relaxed key) and is padded to a capture size.
        """
        decision = self.decide(batch_descriptor, use_cascade_attn)
        return decision.mode, decision.descriptor

    def _count(self, batch: BatchDescriptor, decision: Decision) -> None:
        stats = self.dispatch_stats
        stats.total += 1
        if decision.mode is CUDAGraphMode.FULL:
            stats.full += 1
        elif decision.mode is CUDAGraphMode.PIECEWISE:
            stats.piecewise += 1
        else:
            stats.none += 1
        if decision.reason in _ABOVE_LARGEST:
            stats.above_largest += 1
        key = decision.descriptor
        if key is not None and (
            key.num_tokens != batch.num_tokens or (key.seq_len is not None and key.seq_len != batch.seq_len)
        ):
            stats.padded += 1

    def record_latency(self, batch_descriptor: BatchDescriptor, mode: CUDAGraphMode, latency: float) -> None:
        """Forward a measured latency to the policy (if it learns) under the key it decides on."""
        mode = CUDAGraphMode.parse(mode)
        record = getattr(self.policy, "record", None)
        key = self.policy_key(batch_descriptor)
        if record is not None and key is not None:
            record(key, mode, latency)

    def stats(self) -> dict[str, Any]:
        """Dispatch counters, ``graph_ratio`` and the number of keys per runtime mode, in one flat dict."""
        with self._lock:
            data = self.dispatch_stats.to_dict()
            data["num_keys"] = {mode.name: len(keys) for mode, keys in self.cudagraph_keys.items()}
            return data

    def enable_mode(self, mode: CUDAGraphMode) -> None:
        """Re-initialise the keys for ``mode`` (replacing the current ones)."""
        mode = CUDAGraphMode.parse(mode)
        with self._lock:
            for keys in self.cudagraph_keys.values():
                keys.clear()
            self.initialize_cudagraph_keys(mode, self.uniform_decode_query_len)

    def disable_mode(self, mode: CUDAGraphMode) -> None:
        """Drop the keys of the runtime modes ``mode`` uses (FULL_AND_PIECEWISE: both)."""
        mode = CUDAGraphMode.parse(mode)
        with self._lock:
            for runtime_mode in RUNTIME_GRAPH_MODES:
                if mode.has_mode(runtime_mode):
                    self.cudagraph_keys[runtime_mode].clear()


@dataclasses.dataclass(frozen=True)
class CompositeDecision:
    """What a ``CompositeDispatcher`` decided; unpacks as ``mode, descriptor, dispatcher_name``.

    ``dispatcher_name`` is None when no dispatcher chose a graph; ``asked`` lists the dispatchers
    consulted, in the order they were asked.
    """

    mode: CUDAGraphMode
    descriptor: Optional[BatchDescriptor]
    dispatcher_name: Optional[str]
    asked: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter((self.mode, self.descriptor, self.dispatcher_name))


class CompositeDispatcher:
    """Ask several dispatchers in descending priority; the first graph decision wins.

    Equal priorities are asked in the order they were added. A member is anything with
    ``dispatch(descriptor, use_cascade_attn=False)`` returning ``(mode, descriptor)``
    (a nested ``CompositeDispatcher`` works too). Thread-safe.
    """

    def __init__(self) -> None:
        self._members: list[tuple[int, int, str, Any]] = []
        self._added = 0
        self._lock = threading.Lock()

    def add_dispatcher(self, name: str, dispatcher: Any, priority: int = 0) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__} {short_repr(name)}")
        if isinstance(priority, bool) or not isinstance(priority, numbers.Integral):
            raise TypeError(f"priority must be an integer, got {type(priority).__name__} {short_repr(priority)}")
        if not callable(getattr(dispatcher, "dispatch", None)):
            raise TypeError(f"dispatcher {name!r} has no dispatch() method: {type(dispatcher).__name__}")
        with self._lock:
            if any(member[2] == name for member in self._members):
                raise ValueError(f"a dispatcher named {name!r} is already added; remove it first")
            self._members.append((-int(priority), self._added, name, dispatcher))
            self._added += 1
            self._members.sort(key=lambda member: member[:2])

    def remove_dispatcher(self, name: str) -> None:
        with self._lock:
            kept = [member for member in self._members if member[2] != name]
            if len(kept) == len(self._members):
                raise KeyError(f"no dispatcher named {name!r}; added: {', '.join(self.dispatcher_names) or 'none'}")
            self._members = kept

    @property
    def dispatcher_names(self) -> list[str]:
        """Member names in the order ``dispatch`` asks them."""
        return [member[2] for member in self._members]

    def dispatch(self, key: BatchDescriptor, use_cascade_attn: bool = False) -> CompositeDecision:
        check_descriptor(key, "key")
        with self._lock:
            members = list(self._members)
        asked: list[str] = []
        for _, _, name, dispatcher in members:
            asked.append(name)
            result = dispatcher.dispatch(key, use_cascade_attn=use_cascade_attn)
            if isinstance(result, CompositeDecision):
                mode, descriptor = result.mode, result.descriptor
            else:
                mode, descriptor = result
            if mode is not CUDAGraphMode.NONE:
                return CompositeDecision(mode, descriptor, name, tuple(asked))
        return CompositeDecision(CUDAGraphMode.NONE, None, None, tuple(asked))
