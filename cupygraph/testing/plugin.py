"""pytest plugin and helpers for testing CuPy pipelines under cupygraph (registered as ``pytest11``).

Installed, the plugin changes nothing in a project that does not opt in. What it offers:

* marker ``cupygraph_gpu``: the test is skipped, with the reason, where no usable GPU is found (no
  CuPy, no driver, no device). A project whose tests already carry a marker of its own (say ``gpu``)
  opts in with the ini option ``cupygraph_gpu_marker = gpu``: that marker then skips the same way.
  CuPy is probed only when a collected test carries one of these markers;
* options ``--cupygraph-config FILE`` (run the suite under a config: it becomes the default of
  every ``jit`` without an explicit config) and ``--cupygraph-disable`` (run everything eagerly);
  what they set is put back when the session ends;
* ``assert_graph_matches_eager`` and ``assert_capturable`` helpers;
* fixtures ``graph_stats`` (stats of the functions a test creates) and ``cupygraph_leak_check``
  (their graphs and pool memory go back when cleared; CuPy's default pool does not grow);
* topology snapshots (``assert_graph_topology``, fixture ``graph_topology``) and the option
  ``--cupygraph-update-snapshots`` that rewrites them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import pytest

from .. import backends
from ..config.defaults import set_default_config
from ..config.files import load_config
from ..config.model import CUDAGraphConfig
from ..errors import ConfigError
from .topology import UPDATE_OPTION, set_update_snapshots

__all__ = ["GPU_MARKER", "GPU_MARKER_INI"]

GPU_MARKER = "cupygraph_gpu"
"""The plugin's own marker: always registered, skipped where no usable GPU is found."""

GPU_MARKER_INI = "cupygraph_gpu_marker"
"""ini option naming a project's own marker(s) that should skip like ``cupygraph_gpu``."""

_DISABLE_ENV = "CUPYGRAPH_DISABLE"


# -- the plugin ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _SessionState:
    """What this plugin did to one pytest session's process, so that unconfigure can undo it."""

    gpu_markers: tuple[str, ...] = (GPU_MARKER,)
    env_before: dict[str, Optional[str]] = dataclasses.field(default_factory=dict)  # None: was unset
    config_set: bool = False
    config_before: Optional[CUDAGraphConfig] = None
    update_before: Optional[bool] = None  # None: the option was not given


_STATE = pytest.StashKey[_SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cupygraph")
    group.addoption("--cupygraph-config", metavar="FILE", default=None,
                    help="run the suite with this CUDAGraphConfig file as the default of every jit")
    group.addoption("--cupygraph-disable", action="store_true", default=False,
                    help=f"run every cupygraph front door eagerly (sets {_DISABLE_ENV}=1 for the session)")
    group.addoption(UPDATE_OPTION, action="store_true", default=False,
                    help="write graph topology snapshots (assert_graph_topology) instead of comparing them")
    parser.addini(GPU_MARKER_INI, type="args", default=[],
                  help=f"your own marker name(s) that skip like @pytest.mark.{GPU_MARKER} where no GPU "
                  f"is usable (e.g. gpu); nothing else is touched")


def _gpu_marker_names(config: pytest.Config) -> tuple[str, ...]:
    names = [GPU_MARKER]
    for name in config.getini(GPU_MARKER_INI):
        if not name.isidentifier():
            raise pytest.UsageError(f"ini option {GPU_MARKER_INI}: {name!r} is not a marker name (e.g. gpu)")
        if name not in names:
            names.append(name)
    return tuple(names)


def pytest_configure(config: pytest.Config) -> None:
    state = _SessionState(gpu_markers=_gpu_marker_names(config))
    for name in state.gpu_markers:
        config.addinivalue_line(
            "markers", f"{name}: needs a CUDA GPU with CuPy; skipped with the reason where none is usable")
    path = config.getoption("--cupygraph-config", default=None)
    if path:
        try:
            chosen = load_config(path)
        except ConfigError as err:
            raise pytest.UsageError(f"--cupygraph-config: {err}") from None
        state.config_before, state.config_set = set_default_config(chosen), True
    if config.getoption("--cupygraph-disable", default=False):
        state.env_before[_DISABLE_ENV] = os.environ.get(_DISABLE_ENV)
        os.environ[_DISABLE_ENV] = "1"
    if config.getoption(UPDATE_OPTION, default=False):
        state.update_before = set_update_snapshots(True)
    config.stash[_STATE] = state


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    for name, before in state.env_before.items():
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
    if state.config_set:
        set_default_config(state.config_before)
    if state.update_before is not None:
        set_update_snapshots(state.update_before)
    del config.stash[_STATE]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    needing = [item for item in items if any(item.get_closest_marker(name) for name in state.gpu_markers)]
    if not needing:
        return  # importing CuPy can be slow or noisy: only where a test asks for a GPU
    reason = backends.gpu_unavailable_reason()  # looked up at call time, so a test can stand in for the probe
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in needing:
        item.add_marker(skip)


