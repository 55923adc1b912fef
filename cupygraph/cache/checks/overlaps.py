"""Overlapping arguments a replay could not keep apart: a write into a static copy does not show through
another array on the same memory, where the eager call's write would.

Two read-only arguments may overlap (the replay reads both as the eager call does). A written argument
(batched or unbatched, copied into its static buffer) may overlap neither another argument nor a constant
(read by address), and a constant the function writes into may overlap no argument: the entry refuses the
call with ``AliasedWrite`` and it runs eagerly (``aliased_write``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import AliasedWrite

Extent = tuple[int, int]
"""[low, high) of the bytes an array can touch."""


def byte_extent(address: int, array: Any) -> Extent:
    """The bytes ``array`` (its data at ``address``) can touch: an entry keeps its constants so, by address
    and not by object, since a caller passes a new view of the same memory at every call, and holding the
    array would keep old weights alive."""
    if array.size == 0:
        return (address, address)
    low = high = address
    for n, step in zip(array.shape, array.strides):
        if step < 0:
            low += (n - 1) * step
        else:
            high += (n - 1) * step
    return (low, high + array.itemsize)


def _meet(a: Extent, b: Extent) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def refuse_hidden_writes(overlaps: Callable[[Any, Any], bool], address: Callable[[Any], int], arrays: Sequence[Any],
                         written: Sequence[int], constants: Sequence[Extent], writes_constants: bool,
                         labels: Sequence[str], where: Any) -> None:
    """Raise ``AliasedWrite`` where ``arrays`` (the copied arguments, batched then whole; ``written``: those the
    function writes into, or may) overlap so that a write would not show: see the module. ``constants``: the
    byte extents of the constants (``byte_extent``); ``address``: an array's data address."""
    for i in written:
        for j in range(len(arrays)):
            if j != i and overlaps(arrays[i], arrays[j]):
                first, second = sorted((i, j))
                raise AliasedWrite(
                    f"{labels[first]} and {labels[second]} share memory, and the function writes (or may write) into "
                    f"{labels[i]}: a replay of the graph for {where} could not show the write through both; pass "
                    "separate arrays (this call runs eagerly)")
    for i in range(len(arrays)) if writes_constants else written:
        extent = byte_extent(address(arrays[i]), arrays[i]) if constants else (0, 0)
        if any(_meet(extent, constant) for constant in constants):
            raise AliasedWrite(
                f"{labels[i]} shares memory with a constant argument, and the function writes (or may write) into "
                f"{'a constant' if writes_constants else labels[i]}: a replay of the graph for {where} copies "
                f"{labels[i]}, so the write would not show through both; pass separate arrays (this call runs eagerly)")
