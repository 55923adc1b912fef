"""The reliability suite's ``soak`` fixture: ``--soak`` (registered in tests/conftest.py) runs the long variants.

The default run exercises every category quickly (CPU CI); ``--soak`` multiplies call counts,
examples and replays to the figures the reliability issue names (10 000 calls over 500 shapes,
8 threads x 2 000 calls, 1 000 000 replays, ...).
"""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session")
def soak(request: pytest.FixtureRequest) -> bool:
    """True under ``--soak``."""
    return bool(request.config.getoption("--soak", default=False))


@pytest.fixture(autouse=True)
def _cupygraph_logger_restored():
    """A debug=True function sets the cupygraph logger to DEBUG (and attaches a handler) for the
    whole process; undo that after each test, or every later call logs a record that pytest keeps
    (which the soak and thread tests would count as growth)."""
    logger = logging.getLogger("cupygraph")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    for handler in list(logger.handlers):
        if handler not in handlers:
            logger.removeHandler(handler)
