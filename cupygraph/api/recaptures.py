"""Why a jitted function captures a call: said in the debug log, and counted (and said once) where
it captures a call it has captured before. ``Recaptures`` is what the graph cache tells a jitted
function during a miss (its ``CaptureWatch``).

Two causes of a re-capture: a constant argument that moved (``constant_changed``: a new address, shape, dtype or
strides), and a static argument that never compares equal to an earlier call's
(``static_never_equal``: a new object per call compared by identity, an ``__eq__`` that is never
True), which would otherwise capture a graph on every call with no hit and no word.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..cache import ConstArg, CUDAGraphEntry, CUDAGraphStats, GraphKey
from ..diagnostics.explain import explain_new_key, never_equal_statics
from ..errors import InputMismatchError
from ..logs import logger
from ..reasons import RecaptureReason

UNREPLAYED_TWINS = 2
"""Graphs held for the same batch, differing only in a static value and never replayed since their
capture, after which a further such capture is counted (and the first one warned about)."""


class Recaptures:
    """The keys one jitted function captured, watched for captures that repeat an earlier call's."""

    def __init__(self, name: str, stats: CUDAGraphStats, raises: bool):
        self._name, self._stats, self._raises = name, stats, raises
        self._constants: dict[Any, tuple[ConstArg, ...]] = {}
        self._warned_static = False

    def bound(self, key: GraphKey) -> None:
        """``key``'s constants were bound to a held graph: a later re-capture compares with them."""
        self._constants[key.without_constants()] = key.signature.constants()

    def before_capture(self, key: GraphKey, held: list[CUDAGraphEntry]) -> None:
        """Count (and say) why ``key`` is captured when an earlier call's graph should have served it;
        raises ``InputMismatchError`` for a moved constant under ``on_capture_error="raise"``."""
        self._constant_moved(key)
        self._static_never_equal(key, held)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s() captures %s: %s", self._name, key.descriptor,
                         explain_new_key(key, [e.key for e in held]))

    def clear(self) -> None:
        self._constants.clear()

    def _constant_moved(self, key: GraphKey) -> None:
        consts = key.signature.constants()
        if not consts:
            return
        previous = self._constants.get(rest := key.without_constants())
        if previous is not None and previous != consts:
            if self._raises:
                raise InputMismatchError(
                    f"a constant argument of {self._name}() changed (address, shape, dtype or strides) "
                    f"since capture; was {', '.join(c.describe() for c in previous)}, "
                    f"now {', '.join(c.describe() for c in consts)}"
                )
            self._stats.record_recapture(RecaptureReason.CONSTANT_CHANGED)
            logger.info("%s() re-captures %s: a constant argument changed", self._name, key.descriptor)
        self._constants[rest] = consts

    def _static_never_equal(self, key: GraphKey, held: Iterable[CUDAGraphEntry]) -> None:
        twins, what = 0, None
        for entry in held:
            other = entry.key
            # The capturing call runs the function as it is: any replay means some call found the graph again.
            if other.descriptor == key.descriptor and other.mode is key.mode and entry.replay_count == 0:
                differ = never_equal_statics(other.signature, key.signature)
                if differ is not None:
                    twins, what = twins + 1, differ
        if twins < UNREPLAYED_TWINS:
            return
        self._stats.record_recapture(RecaptureReason.STATIC_NEVER_EQUAL, f"{self._name}(): {what}")
        if not self._warned_static:
            self._warned_static = True
            logger.warning(
                "cupygraph: %s() captured %d graphs for batch %d that differ only in static %s, and none was "
                "replayed: a static argument is part of the graph key, so a value that never compares equal "
                "to an earlier one (a new object per call without __eq__, an __eq__ that is never True) "
                "captures a new graph on every call. Pass such a value as an array, or give its type __eq__ and "
                "__hash__ by value (a frozen dataclass)", self._name, twins + 1, key.descriptor.num_tokens, what)
