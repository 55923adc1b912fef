"""Static input buffers and their padding rows.

``InputArena`` lets the graphs of one signature share static input buffers. ``pad_rows`` writes the
rows past a call's real batch, the one way capture, replay and ``warmup`` fill them (on both
backends): ``pad_mode="constant"`` writes ``pad_value``; ``"edge"`` repeats the last real row, so a
function that accepts every real row accepts the padding too (a zero matrix is singular, a copy of
the last real one is not). ``check_pad_value`` makes sure, before a capture, that ``pad_value`` can
be written exactly into the arrays it pads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backends.base import Backend
from ..config.values import pad_value_problem
from ..errors import InputMismatchError


class InputArena:
    """Static input buffers shared by the graphs of one signature, sized for the largest batch.

    Graphs of one family run one after another (the family's exec lock and stream ordering), so
    they can read their inputs from views of one buffer: memory grows with the largest graph, not
    with the sum. ``state`` records which entry last wrote the buffers and for how many real rows,
    so the padding is rewritten whenever another graph wrote there since (and, under
    ``pad_mode="edge"``, on every padded call: the padding copies data).
    """

    __slots__ = ("buffers", "made_bytes", "state")

    def __init__(self) -> None:
        self.buffers: dict[int, Any] = {}
        self.state: Any = None
        self.made_bytes = 0
        """Bytes of every buffer this arena made (a key's static memory on the host: its growth across
        the key's recording)."""

    def view(self, backend: Backend, position: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """A buffer of ``shape`` for argument ``position``: a view of the shared one when it fits."""
        base = self.buffers.get(position)
        if base is None or base.shape[:1] < shape[:1] or base.shape[1:] != shape[1:] or base.dtype != dtype:
            base = backend.empty(shape, dtype)
            self.buffers[position] = base
            self.made_bytes += int(base.nbytes)
        return base[: shape[0]] if base.ndim else base


def pad_rows(backend: Backend, buf: Any, rows: int, pad_value: Any, pad_mode: str, stream: Any = None) -> None:
    """Fill ``buf[rows:]``, the padding of a batch of ``rows`` real rows: ``pad_value``, or under
    ``pad_mode="edge"`` copies of the last real row (``pad_value`` where there is none)."""
    if rows >= buf.shape[0]:
        return
    if pad_mode == "edge" and rows:
        backend.repeat_row(buf, rows, stream)
    else:
        backend.fill_rows(buf, rows, pad_value, stream)


def padding_text(pad_value: Any, pad_mode: str) -> str:
    """How the padding rows are filled, in words (for messages)."""
    return "copies of the last real row (pad_mode='edge')" if pad_mode == "edge" else f"pad_value={pad_value!r}"


def check_pad_value(args: Sequence[Any], batched: Sequence[int], pad_value: Any, name: str) -> None:
    """``InputMismatchError`` naming the argument when ``pad_value`` cannot be written exactly into the
    padding rows of a batched argument of ``name()`` (checked before a capture: the error is the call's)."""
    for i in batched:
        dtype = getattr(args[i], "dtype", None) if i < len(args) else None
        if dtype is None:
            continue
        problem = pad_value_problem(pad_value, dtype)
        if problem is not None:
            raise InputMismatchError(f"{problem}: it cannot fill the padding of argument {i} of {name}() "
                                     f"({np.dtype(dtype)}); choose a pad_value that fits (for example 0)")
