"""The project's tests use cupygraph's own pytest plugin (gpu marker, fixtures, options), and every
test is checked to leave the process as it found it.

Installed, the plugin comes through its ``pytest11`` entry point; run from a plain checkout (the
GPU machine puts the project on PYTHONPATH), it is loaded here instead.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points

import pytest

from cupygraph.config.defaults import set_default_config

# Set and changed by pytest itself around every test phase.
_PYTEST_OWNED_ENV = frozenset({"PYTEST_CURRENT_TEST"})


def _plugin_installed() -> bool:
    try:
        return any(ep.value == "cupygraph.testing" for ep in entry_points(group="pytest11"))
    except Exception:  # a broken metadata install: load the plugin ourselves
        return False


if not _plugin_installed():
    pytest_plugins = ("cupygraph.testing",)


def pytest_addoption(parser) -> None:
    # Registered here, not in tests/reliability/conftest.py: pytest only takes options from the
    # conftest files it loads at start-up, and a run of `pytest tests --soak` does not load that one.
    parser.addoption(
        "--soak", action="store_true", default=False,
        help="run the long variants of tests/reliability (minutes; the GPU session uses it)",
    )


@pytest.fixture(autouse=True)
def _process_left_as_found():
    """Every test leaves the process as it found it, so the suite passes in any order.

    A test that leaves an environment variable, cupygraph's default config or the ``cupygraph``
    logger's level or handlers changed fails here, naming what it left (which is put back, so later
    tests do not inherit it). ``jit(debug=True)`` changes no logging state (issue 27).
    """
    env = {k: v for k, v in os.environ.items() if k not in _PYTEST_OWNED_ENV}
    default = set_default_config(None)
    set_default_config(default)
    logger = logging.getLogger("cupygraph")
    level, handlers = logger.level, list(logger.handlers)
    yield
    left = []
    if logger.level != level:
        left.append(f"the cupygraph logger's level {logging.getLevelName(logger.level)} "
                    f"(was {logging.getLevelName(level)})")
        logger.setLevel(level)
    added = [h for h in logger.handlers if h not in handlers]
    if added:
        left.append(f"handlers {added} on the cupygraph logger")
    for handler in added:
        logger.removeHandler(handler)
    now = {k: v for k, v in os.environ.items() if k not in _PYTEST_OWNED_ENV}
    for name in sorted(set(env) | set(now)):
        if env.get(name) != now.get(name):
            left.append(f"environment variable {name}={now.get(name)!r} (was {env.get(name)!r})")
            if name in env:
                os.environ[name] = env[name]
            else:
                del os.environ[name]
    current = set_default_config(default)
    if current is not default:
        left.append(f"default config {current!r} (was {default!r})")
    if left:
        pytest.fail("the test left the process changed: " + "; ".join(left), pytrace=False)
