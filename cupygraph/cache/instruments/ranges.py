"""NVTX ranges around capture, replay, fallback and graph breaks, for Nsight Systems timelines.

On with the config's ``nvtx`` field or ``CUPYGRAPH_NVTX=1``; the decision is taken once per
graph cache (``Instruments``), so with ranges off nothing on any call path checks for them.
The ranges go to the ``nvtx`` package (an optional extra: ``pip install cupygraph[nvtx]``), in
the domain ``cupygraph``; without it, asking for them logs one warning and runs without.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional, Protocol

from ...config.defaults import env_flag
from ...logs import logger

DOMAIN = "cupygraph"
ENV = "CUPYGRAPH_NVTX"


class RangeProvider(Protocol):
    def push(self, message: str) -> None: ...

    def pop(self) -> None: ...


class NvtxRanges:
    """Ranges in the ``cupygraph`` domain of the ``nvtx`` package."""

    def __init__(self, nvtx: Any):
        self._push, self._pop = nvtx.push_range, nvtx.pop_range

    def push(self, message: str) -> None:
        self._push(message=message, domain=DOMAIN)

    def pop(self) -> None:
        self._pop(domain=DOMAIN)


_override: Optional[RangeProvider] = None
_warned = False


@contextmanager
def use_provider(provider: RangeProvider) -> Iterator[RangeProvider]:
    """Graph caches made inside send their ranges to ``provider`` (tests, other profilers)."""
    global _override
    previous, _override = _override, provider
    try:
        yield provider
    finally:
        _override = previous


def env_requests_ranges() -> bool:
    return env_flag(ENV)


def range_provider(enabled: bool) -> Optional[RangeProvider]:
    """Where ranges go when ``enabled`` (or ``CUPYGRAPH_NVTX`` is set); None when they are off."""
    global _warned
    if not (enabled or env_requests_ranges()):
        return None
    if _override is not None:
        return _override
    try:
        import nvtx
    except ImportError:
        if not _warned:
            _warned = True
            logger.warning("NVTX ranges were asked for (config nvtx or %s) but the nvtx package is not installed: "
                           "pip install nvtx (or cupygraph[nvtx]); running without ranges", ENV)
        return None
    return NvtxRanges(nvtx)
