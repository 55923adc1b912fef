"""Why a call captured, re-captured or ran eagerly, in words (like ``jax_explain_cache_misses``).

Logging goes to the ``cupygraph`` logger. ``CUPYGRAPH_LOG=debug`` (or ``info``, ``warning``) sets
its level and attaches a stderr handler; a config with ``debug=True`` does the same at debug level.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any, Optional

from .registry import GraphKey

logger = logging.getLogger("cupygraph")
_configured = False


def configure_logging(level: Optional[str] = None) -> None:
    """Attach one stderr handler to the ``cupygraph`` logger at ``level`` (default: $CUPYGRAPH_LOG)."""
    global _configured
    level = level or os.environ.get("CUPYGRAPH_LOG")
    if not level:
        return
    numeric = logging.getLevelName(level.strip().upper())
    if not isinstance(numeric, int):
        raise ValueError(f"CUPYGRAPH_LOG={level!r} is not a logging level; use debug, info, warning or error")
    logger.setLevel(numeric)
    if not _configured:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("cupygraph %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        _configured = True


def _describe_part(part: Any) -> str:
    if isinstance(part, tuple) and part:
        kind = part[0]
        if kind == "batch":
            return f"batched array {part[2]}[n, {', '.join(map(str, part[1]))}]"
        if kind == "array":
            return f"array {part[2]}{list(part[1])}"
        if kind == "const":
            return f"constant {part[3]}{list(part[2])} at {hex(part[1])}"
        if kind == "static":
            return f"static {part[1].__name__} {part[2]!r}"
        if kind == "kwargs":
            return "keywords " + ", ".join(f"{k}={v!r}" for k, _, v in part[1])
        if kind == "fn":
            return f"function {part[1]}"
    return repr(part)


def explain_new_key(key: GraphKey, held: Iterable[GraphKey]) -> str:
    """Which part of ``key`` differs from the closest key already held."""
    held = [k for k in held if k != key]
    if not held:
        return f"first graph of this function ({key.mode.name}, batch {key.descriptor.num_tokens})"
    same_sig = [k for k in held if k.signature == key.signature and k.mode is key.mode]
    if same_sig:
        sizes = sorted({k.descriptor.num_tokens for k in same_sig})
        return f"new batch size {key.descriptor.num_tokens} (held for this signature: {sizes})"
    if any(k.signature == key.signature for k in held):
        return f"new runtime mode {key.mode.name} for batch {key.descriptor.num_tokens}"
    closest = min(held, key=lambda k: sum(a != b for a, b in zip(k.signature, key.signature))
                  + abs(len(k.signature) - len(key.signature)))
    diffs = []
    for i, (was, now) in enumerate(zip(closest.signature, key.signature)):
        if was != now:
            diffs.append(f"argument {i}: {_describe_part(was)} -> {_describe_part(now)}")
    if len(closest.signature) != len(key.signature):
        diffs.append(f"{len(closest.signature)} -> {len(key.signature)} arguments")
    return "; ".join(diffs) or "new signature"
