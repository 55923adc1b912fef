"""The config front doors use when given none, and ``CUPYGRAPH_DISABLE``.

Process-wide state kept apart from the model: ``set_default_config`` (the pytest plugin's
``--cupygraph-config``) and the environment switch that turns every front door eager.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

from ..logs import logger
from .model import CUDAGraphConfig
from .modes import CUDAGraphMode

__all__ = ["apply_env_overrides", "default_config", "graphs_disabled_by_env", "set_default_config"]


_DISABLE_LOGGED = False
_DEFAULT_CONFIG: Optional[CUDAGraphConfig] = None


def set_default_config(config: Optional[CUDAGraphConfig]) -> Optional[CUDAGraphConfig]:
    """Make ``config`` what front doors use when given none (``None`` restores the defaults).

    Returns the previous default (None: the built-in one), so a caller can put it back. The pytest
    plugin's ``--cupygraph-config`` uses this to run a whole suite under a config.
    """
    global _DEFAULT_CONFIG
    if config is not None and not isinstance(config, CUDAGraphConfig):
        raise TypeError(f"set_default_config needs a CUDAGraphConfig or None, got {type(config).__name__}")
    previous, _DEFAULT_CONFIG = _DEFAULT_CONFIG, config
    return previous


def default_config() -> CUDAGraphConfig:
    """The config front doors use when given none (configs are immutable, so it is shared)."""
    return _DEFAULT_CONFIG if _DEFAULT_CONFIG is not None else CUDAGraphConfig()


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """Environment switch ``name``: on for 1, true, yes or on; off for 0, false, no or off (any case);
    ``default`` when unset or empty. Anything else keeps ``default`` with a warning naming the variable:
    a typo must not flip a switch, and must not make ``import cupygraph`` fail either."""
    value = os.environ.get(name, "").strip().lower()
    if value in _ON or value in _OFF:
        return value in _ON
    if value:
        warnings.warn(f"{name}={os.environ[name]!r} is not a switch; use {', '.join(_ON[:-1])} or {_ON[-1]}, "
                      f"or {', '.join(_OFF[:-1])} or {_OFF[-1]}; left at its default ({'on' if default else 'off'})",
                      stacklevel=2)
    return default


def routes_library_calls(config: CUDAGraphConfig) -> bool:
    """Whether ``config``'s recordings route library calls (``backends/routing.py``): its
    ``route_library_calls``, unless ``CUPYGRAPH_ROUTE_LIBRARY_CALLS`` is switched off (``env_flag``)."""
    return config.route_library_calls and env_flag("CUPYGRAPH_ROUTE_LIBRARY_CALLS", default=True)


def graphs_disabled_by_env() -> bool:
    """``CUPYGRAPH_DISABLE=1`` makes every front door run eagerly; logged once per process."""
    global _DISABLE_LOGGED
    disabled = env_flag("CUPYGRAPH_DISABLE")
    if disabled and not _DISABLE_LOGGED:
        _DISABLE_LOGGED = True
        logger.warning("CUPYGRAPH_DISABLE is set: every cupygraph front door runs eagerly (mode NONE)")
    return disabled


def apply_env_overrides(config: CUDAGraphConfig) -> CUDAGraphConfig:
    """``config`` as front doors run it: under ``CUPYGRAPH_DISABLE`` the same config in mode NONE."""
    if graphs_disabled_by_env() and config.mode is not CUDAGraphMode.NONE:
        return config.replace(mode=CUDAGraphMode.NONE)
    return config
