"""The host twin of ``cupy_random.py``: NumPy's legacy ``np.random`` draws routed while a function is recorded.

The host reference routes exactly the calls the GPU routes (``legacy_random.py``), to a NumPy
generator (``cupygraph.random`` on the host) seeded from NumPy's global ``RandomState``, the one
``np.random.seed`` seeds: one value drawn from it per recording. Its replays draw from that generator
again (``backends/guards/host_escapes.py`` routes the replay's calls), fresh numbers every replay
as the GPU graph draws them. The rest of ``np.random`` stays refused, as the GPU refuses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..backends.guards.host_refusal import capture_run_active
from ..backends.routing import LEGACY_RANDOM, routing_to
from .legacy_random import LegacyDraws

__all__ = ["routed_numpy_random"]


def _global_seed() -> int:
    """One value drawn from NumPy's global ``RandomState`` (the legacy functions' generator)."""
    return int(np.random.mtrand._rand.randint(0, np.iinfo(np.int64).max, dtype=np.int64))


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


@contextmanager
def routed_numpy_random(fn: Any = None) -> Iterator[None]:
    """Legacy ``np.random`` draws from the user's code go to one generator of this recording meanwhile."""
    router = LegacyDraws(fn, "host", np, _is_numpy, _global_seed, capture_run_active, lambda: -1)
    with routing_to(LEGACY_RANDOM, router):
        yield
