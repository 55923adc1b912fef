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
