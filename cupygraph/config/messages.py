"""Config errors as one line per problem: file, line, field path, bad value and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, Optional

from pydantic import ValidationError

from .modes import short_repr
from .values import MAX_INT


def field_path(loc: tuple[Any, ...]) -> str:
    """``("capture_sizes", 3)`` -> ``capture_sizes[3]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            part = str(part)
            if not part.isprintable() or len(part) > 80:
                part = short_repr(part)  # a key from a file: one line, bounded
            path += f".{part}" if path else part
    return path or "<config>"


def did_you_mean(name: Any, choices: Iterable[str]) -> str:
    """`` did you mean 'capture_sizes'?`` for a misspelt ``name`` (any case); empty when nothing is close."""
    if not isinstance(name, str) or len(name) > 80:
        return ""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" did you mean '{by_lower[close[0]]}'?" if close else ""


def format_validation_error(
    err: ValidationError, *, source: Optional[str] = None, line_of: Any = None, fields: Iterable[str] = ()
) -> str:
    """One line per problem: file, line (when known), field path, bad value, what is allowed.

    ``fields``: the valid field names, listed when a field is unknown.
    """
    lines = []
    for problem in err.errors():
        loc = tuple(problem.get("loc", ()))
        message = problem.get("msg", "invalid value")
        if message.startswith("Value error, "):
            message = message[len("Value error, "):]
        if problem.get("type") == "less_than_equal" and problem.get("ctx", {}).get("le") == MAX_INT:
            message += ", the largest a 32-bit CUDA or cuBLAS dimension holds"
        if problem.get("type") == "extra_forbidden":
            hint = did_you_mean(loc[-1], fields) if loc else ""
            message = f"unknown field;{hint} valid fields: {', '.join(fields)}"
        where = source or "config"
        line = line_of(loc) if line_of is not None else None
        if line is not None:
            where += f":{line}"
        if not loc:
            # A rule across fields: its message names the fields and values itself.
            lines.append(f"{where}: {message}")
            continue
        shown = "" if problem.get("type") == "extra_forbidden" or "input" not in problem else (
            f" (got {short_repr(problem['input'])})"
        )
        lines.append(f"{where}: field '{field_path(loc)}': {message}{shown}")
    return "\n".join(lines)
