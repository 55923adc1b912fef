"""The optional compiled part of cupygraph (``_replay.c``), or its stand-ins where it was not built.

``setup.py`` builds it where a C compiler is found; without it ``COMPILED`` is False, every call
takes the Python path (same results, more host time) and nothing else changes. It needs neither
CuPy nor a GPU to import: the jitted function's class derives from ``FastFunction`` everywhere.
"""

from __future__ import annotations

from typing import Any


class PythonFastFunction:
    """``FastFunction`` without the compiler: every call goes to the Python path, ``_call``."""

    _replayer: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)  # type: ignore[attr-defined]


try:
    from ._replay import MAX_ARGUMENTS, FastFunction, Replayer, references
except ImportError:  # built without a C compiler
    FastFunction = PythonFastFunction  # type: ignore[assignment,misc]
    Replayer = None  # type: ignore[assignment,misc]
    references = None  # type: ignore[assignment]
    MAX_ARGUMENTS = 0

COMPILED = Replayer is not None
"""Whether the compiled replay is built and used."""

__all__ = ["COMPILED", "MAX_ARGUMENTS", "FastFunction", "PythonFastFunction", "Replayer", "references"]
