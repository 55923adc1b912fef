"""New constant arrays (weights) bound to a held graph instead of a re-capture (``input_binding="auto"``).

Constants are read by address, so their address is part of a graph's key. When a call brings
constants of the very shapes, dtypes and strides a held graph was captured with, only somewhere
else, the graph's nodes are pointed at them (``CUDAGraphEntry.rebind_constants``) and the graph is
held under the new key: the key always names the arrays the graph reads. Counted as a rebind of
each constant argument, not as a re-capture.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Optional

from ..cache.entry import CUDAGraphEntry
from ..cache.key import ConstArg, GraphKey
from ..cache.registry import CUDAGraphRegistry
from ..cache.stats import CUDAGraphStats
from ..errors import InputMismatchError
from ..reasons import RecaptureReason

logger = logging.getLogger("cupygraph")


def rebind_constants(registry: CUDAGraphRegistry, key: GraphKey, args: tuple[Any, ...], constant_argnums: Sequence[int],
                     *, name: str) -> Optional[CUDAGraphEntry]:
    """The held graph that differs from ``key`` only in where its constants live, now reading this
    call's; None where there is none or its nodes cannot be re-pointed. The caller holds the family lock."""
    consts = key.signature.constants()
    if not consts or registry.config.input_binding != "auto":
        return None
    rest = key.without_constants()
    layout = [(c.shape, c.dtype, c.strides) for c in consts]
    is_array = registry.backend.is_array
    positions = [i for i in sorted(constant_argnums) if i < len(args) and is_array(args[i])]
    for entry in registry.entries():
        held = entry.key
        if (held.without_constants() != rest
                or [(c.shape, c.dtype, c.strides) for c in held.signature.constants()] != layout):
            continue
        if entry.rebind_constants([(i, args[i]) for i in positions]):
            registry.rekey(entry, key)
            logger.info("%s() binds new constant argument(s) %s to its graph for %s instead of re-capturing",
                        name, positions, key.descriptor)
            return entry
    return None


def count_moved_constants(seen: dict[tuple[Any, ...], tuple[ConstArg, ...]], key: GraphKey, *, name: str,
                          stats: CUDAGraphStats, raises: bool) -> None:
    """Before capturing ``key``: count a re-capture caused by a constant argument that moved since the
    constants ``seen`` last for the rest of its key, and say which one (``InputMismatchError`` under raise)."""
    consts = key.signature.constants()
    if not consts:
        return
    previous = seen.get(rest := key.without_constants())
    if previous is not None and previous != consts:
        if raises:
            raise InputMismatchError(
                f"a constant argument of {name}() changed (address, shape, dtype or strides) "
                f"since capture; was {', '.join(c.describe() for c in previous)}, "
                f"now {', '.join(c.describe() for c in consts)}"
            )
        stats.record_recapture(RecaptureReason.CONSTANT_CHANGED)
        logger.info("%s() re-captures %s: a constant argument changed", name, key.descriptor)
    seen[rest] = consts
