"""CuPy's legacy ``cupy.random`` draws routed to a device-state generator while a function is recorded (issue 29).

``cupy.random.rand``, ``normal``, ``randint``, ``choice``, ``shuffle``, ... draw from CuPy's global
``RandomState`` of the device: cuRAND's host API, which CuPy refuses on a capturing stream, or a
seed kept on the host and passed to a kernel, which a graph would freeze. Their guard
(``backends/guards/cupy_legacy_random.py``) hands each such call from the user's code to this
recording's ``LegacyDraws`` (``legacy_random.py``: which calls are routed, how, and how they are
seeded): it draws the same distribution, shape and dtype from a ``cupygraph.random`` generator
(CuPy's ``Philox4x3210``), whose state lives on the device, so every replay of the graph draws
fresh numbers. The seed is taken from CuPy's ``RandomState`` of the device as CuPy takes the seeds
of its own kernel-drawn distributions (``RandomState._get_seed``), so ``cupy.random.seed(s)`` or
``CUPY_SEED`` makes the replays' numbers the same run after run; they differ from the numbers eager
CuPy would draw. The graph holds its generator: one Philox state of CuPy's default size per
captured key that routes draws, on each device it draws on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..backends.capturing import stream_is_capturing
from ..backends.routing import LEGACY_RANDOM, routing_to
from .legacy_random import LegacyDraws

__all__ = ["routed_cupy_random"]


def _global_seed() -> int:
    """A seed from CuPy's global ``RandomState`` of the current device; fresh entropy from a CuPy without
    ``_get_seed`` (CuPy has had it for years: its kernel-drawn distributions seed with it)."""
    import cupy

    take = getattr(cupy.random.get_random_state(), "_get_seed", None)
    return int(take(1)) if callable(take) else int.from_bytes(os.urandom(8), "little")


def _capturing() -> bool:
    import cupy

    return stream_is_capturing(cupy.cuda.get_current_stream())


def _device() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDevice())


@contextmanager
def routed_cupy_random(fn: Any = None) -> Iterator[None]:
    """Legacy ``cupy.random`` draws from the user's code go to one generator of this recording meanwhile."""
    try:
        import cupy
    except ImportError:  # a stand-in for the CuPy backend (the test suite's): no cupy.random to route
        yield
        return
    router = LegacyDraws(fn, "cupy", cupy, lambda value: isinstance(value, cupy.ndarray), _global_seed, _capturing,
                         _device)
    with routing_to(LEGACY_RANDOM, router):
        yield
