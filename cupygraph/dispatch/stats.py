"""``DispatchStats``: how a dispatcher decided, counted per runtime mode."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class DispatchStats:
    """How a dispatcher decided: calls per runtime mode and how often a graph key was found."""

    total: int = 0
    full: int = 0
    piecewise: int = 0
    none: int = 0
    padded: int = 0
    above_largest: int = 0

    def graph_ratio(self) -> float:
        """Fraction of dispatches that chose a graph mode (FULL or PIECEWISE)."""
        return (self.full + self.piecewise) / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["graph_ratio"] = round(self.graph_ratio(), 6)
        return data
