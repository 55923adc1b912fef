"""Why a call captured, re-captured or ran eagerly, in words (like ``jax_explain_cache_misses``).

Logging goes to the ``cupygraph`` logger. ``CUPYGRAPH_LOG=debug`` (or ``info``, ``warning``) sets
its level and attaches a stderr handler, for every function; a config with ``debug=True`` writes that
function's decisions to stderr, and no other function's (``logs.py``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterable
from typing import Any, Optional

from ..cache import GraphKey, Signature, StaticArg, keyable
from ..logs import logger

_configured = False


def configure_logging(level: Optional[str] = None) -> None:
    """Attach one stderr handler to the ``cupygraph`` logger at ``level`` (default: $CUPYGRAPH_LOG).

    A bad ``level`` argument raises ``ValueError``. A bad ``CUPYGRAPH_LOG`` is only warned about:
    this runs at ``import cupygraph``, and a typo in an environment variable must not make the
    package (and every CLI command) unimportable.
    """
    global _configured
    from_env = level is None
    level = level or os.environ.get("CUPYGRAPH_LOG")
    if not level:
        return
    numeric = logging.getLevelName(level.strip().upper())
    if not isinstance(numeric, int):
        message = f"CUPYGRAPH_LOG={level!r} is not a logging level; use debug, info, warning or error"
        if from_env:
            warnings.warn(f"{message}; logging is left as it is", stacklevel=2)
            return
        raise ValueError(message)
    logger.logger.setLevel(numeric)
    if not _configured:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("cupygraph %(levelname)s: %(message)s"))
        logger.logger.addHandler(handler)
        _configured = True


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
    closest = min(held, key=lambda k: len(_differences(k.signature, key.signature)))
    return "; ".join(_differences(closest.signature, key.signature)) or "new signature"


def never_equal_statics(was: Signature, now: Signature) -> Optional[str]:
    """The static arguments (``"argument 1 (a Foo)"``) in which ``now`` differs from ``was`` when they
    are the only difference and each is a value that cannot equal an earlier one (``_never_equal``);
    else None."""
    if was.namespace != now.namespace or len(was.args) != len(now.args):
        return None
    pairs = []
    for i, (a, b) in enumerate(zip(was.args, now.args)):
        if a != b:
            if not (isinstance(a, StaticArg) and isinstance(b, StaticArg) and a.type is b.type):
                return None
            pairs.append((f"argument {i}", a.value, b.value))
    old, new = (was.kwargs.items if was.kwargs else ()), (now.kwargs.items if now.kwargs else ())
    if [(k, t) for k, t, _ in old] != [(k, t) for k, t, _ in new]:
        return None
    pairs += [(f"keyword argument {k!r}", x, y) for (k, t, x), (_, _, y) in zip(old, new)
              if StaticArg(t, x) != StaticArg(t, y)]
    if not pairs or not all(_never_equal(x, y) for _, x, y in pairs):
        return None
    return ", ".join(f"{label} (a {type(x).__qualname__})" for label, x, _ in pairs)


def _never_equal(was: Any, now: Any) -> bool:
    """Whether two unequal static values are one value that keys as a new one on every call: it does not
    equal itself (an ``__eq__`` that is never True), or it is compared by identity and holds the same
    state (a new object per call). Two functions, or two objects of other contents, are really two."""
    try:
        key = keyable(now)
        if not key == key:
            return True
        identity_eq = getattr(type(now), "__eq__") is object.__eq__  # noqa: B009 (mypy rejects the attribute)
        return identity_eq and not callable(now) and hasattr(now, "__dict__") and bool(vars(was) == vars(now))
    except Exception:  # a comparison that fails (arrays inside) says nothing either way
        return False


def _differences(was: Signature, now: Signature) -> list[str]:
    """What changed from ``was`` to ``now``, argument by argument, in words."""
    diffs = [f"argument {i}: {a.describe()} -> {b.describe()}"
             for i, (a, b) in enumerate(zip(was.args, now.args)) if a != b]
    if len(was.args) != len(now.args):
        diffs.append(f"{len(was.args)} -> {len(now.args)} arguments")
    for absent, a, b in (("no keywords", was.kwargs, now.kwargs), ("no function", was.namespace, now.namespace)):
        if a != b:
            diffs.append(f"{a.describe() if a else absent} -> {b.describe() if b else absent}")
    return diffs
