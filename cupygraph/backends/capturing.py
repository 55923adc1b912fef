"""Whether a stream is capturing: the one test every capture-aware op asks."""

from __future__ import annotations

from typing import Any


def stream_is_capturing(stream: Any) -> bool:
    """True while ``stream`` (a CuPy stream) records into a graph. A capture that an illegal call
    invalidated makes ``is_capturing`` raise: it is still a capture (it must be ended, and it is
    still no moment to allocate or call a library)."""
    try:
        return bool(stream.is_capturing())
    except Exception:
        return True
