"""The project's tests use cupygraph's own pytest plugin (gpu marker, fixtures, options).

Installed, the plugin comes through its ``pytest11`` entry point; run from a plain checkout (the
GPU machine puts the project on PYTHONPATH), it is loaded here instead.
"""

from __future__ import annotations

from importlib.metadata import entry_points


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
