"""New constant arrays (weights) bound to a held graph instead of a re-capture (``input_binding="auto"``).

Constants are read by address, so their address is part of a graph's key. When a call brings
constants of the very shapes, dtypes and strides a held graph was captured with, only somewhere
else, the graph's nodes are pointed at them (``CUDAGraphEntry.rebind_constants``) and the graph is
held under the new key: the key always names the arrays the graph reads. Counted as a rebind of
each constant argument, not as a re-capture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..cache.entry import CUDAGraphEntry
from ..cache.key import GraphKey
from ..cache.registry import CUDAGraphRegistry
from ..logs import logger


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
