"""The reliability suite's ``soak`` fixture: ``--soak`` (registered in tests/conftest.py) runs the long variants.

The default run exercises every category quickly (CPU CI); ``--soak`` multiplies call counts,
examples and replays to the figures the reliability issue names (10 000 calls over 500 shapes,
8 threads x 2 000 calls, 1 000 000 replays, ...).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def soak(request: pytest.FixtureRequest) -> bool:
    """True under ``--soak``."""
    return bool(request.config.getoption("--soak", default=False))

