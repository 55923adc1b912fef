"""``CUDAGraphMode``: the one mode enum of cupygraph, with vLLM's meanings and helpers."""

from __future__ import annotations

import enum
from typing import Any


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: error messages echo values, never whole files."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CUDAGraphMode(enum.Enum):
    """CUDA graph modes with vLLM's meanings.

    NONE, PIECEWISE and FULL are runtime modes (what one call actually does). FULL_DECODE_ONLY and
    FULL_AND_PIECEWISE are configuration modes that pick FULL for uniform-decode batches and
    NONE / PIECEWISE for the others; their value is the pair (decode mode, mixed mode).
    """

    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (FULL, NONE)
    FULL_AND_PIECEWISE = (FULL, PIECEWISE)

    def separate_routine(self) -> bool:
        """True when uniform-decode and mixed batches use different modes."""
        return isinstance(self.value, tuple)

    def decode_mode(self) -> CUDAGraphMode:
        """The mode used for uniform-decode batches."""
        return CUDAGraphMode(self.value[0]) if self.separate_routine() else self

    def mixed_mode(self) -> CUDAGraphMode:
        """The mode used for mixed (prefill or non-uniform) batches."""
        return CUDAGraphMode(self.value[1]) if self.separate_routine() else self

    def has_mode(self, mode: CUDAGraphMode) -> bool:
        """True when ``mode`` is used for some kind of batch under this mode."""
        if self.separate_routine():
            return mode in (self.decode_mode(), self.mixed_mode())
        return self is mode

    def max_cudagraph_mode(self) -> CUDAGraphMode:
        """The strongest runtime mode this mode may use (FULL > PIECEWISE > NONE)."""
        return CUDAGraphMode(max(self.value)) if self.separate_routine() else self

    def has_full_cudagraphs(self) -> bool:
        return self.max_cudagraph_mode() is CUDAGraphMode.FULL

    def has_piecewise_cudagraphs(self) -> bool:
        return self.has_mode(CUDAGraphMode.PIECEWISE)

    def has_uniform_decode_graphs(self) -> bool:
        """True when uniform-decode batches get FULL graphs of their own (FULL_DECODE_ONLY,
        FULL_AND_PIECEWISE), on their own ladder of sizes (vLLM's separate decode routine)."""
        return self.separate_routine() and self.decode_mode() is CUDAGraphMode.FULL

    def has_graphs(self) -> bool:
        """True unless this mode never replays a graph."""
        return self is not CUDAGraphMode.NONE

    def valid_runtime_modes(self) -> bool:
        """True for the modes a single call can run in: NONE, PIECEWISE, FULL."""
        return self in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)

    @classmethod
    def parse(cls, value: Any) -> CUDAGraphMode:
        """A member, or its name in any case (``"full_and_piecewise"``).

        The enum's internal values (``2``, ``(2, 1)``) are not accepted: ``2.0 == 2`` and a list
        would pass for a tuple, so a number in a config file would silently pick a mode.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = cls.__members__.get(value.strip().upper())
            if member is not None:
                return member
        raise ValueError(
            f"unknown CUDA graph mode {short_repr(value)}; valid modes (names, any case): "
            f"{', '.join(cls.__members__)}"
        )
