"""The ``cupygraph`` logger, and debug output that belongs to the one function that asked for it.

Every module logs through ``logger``: the ``cupygraph`` logger, whose level and handlers are the
process's (``CUPYGRAPH_LOG`` sets them at import). A function made with ``debug=True`` gets a logger
of its own (``function_log``) that writes to stderr at debug level; while it runs one of its calls
(``debugging``), the records of that call that the ``cupygraph`` logger would drop go there too.
Records of other functions, and of other threads, do not; making such a function changes no
logging state (no level, no handler, no logger registered with ``logging``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Optional

_debugged: ContextVar[Optional[logging.Logger]] = ContextVar("cupygraph_debugged_call", default=None)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler to whatever ``sys.stderr`` is when a record comes (a redirect, pytest's capture)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # StreamHandler.__init__ sets it: the current sys.stderr is always the one used


def function_log(name: str) -> logging.Logger:
    """The debug log of the function ``name``: stderr, every level; not registered with ``logging``."""
    log = logging.Logger(f"cupygraph.{name}", logging.DEBUG)
    handler = _Stderr()
    handler.setFormatter(logging.Formatter(f"cupygraph {name}() %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    return log


@contextmanager
def debugging(log: logging.Logger) -> Iterator[None]:
    """The records of the block (this thread or task only) also go to ``log``."""
    token = _debugged.set(log)
    try:
        yield
    finally:
        _debugged.reset(token)


class LibraryLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The ``cupygraph`` logger, and during a debugged call that call's function log."""

    def isEnabledFor(self, level: int) -> bool:
        return _debugged.get() is not None or self.logger.isEnabledFor(level)

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stacklevel", 2)  # records name the module that logged, not this one
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args, **kwargs)
            return
        own = _debugged.get()
        if own is not None:  # a record the process's logging drops, of a call that asked for debug output
            own.log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return msg, kwargs


logger = LibraryLogger(logging.getLogger("cupygraph"), {})
"""What every cupygraph module logs through."""
