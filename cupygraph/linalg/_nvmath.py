"""nvmath-python's library bindings, imported on first use (importing nvmath takes 0.35-0.74 s)."""

from __future__ import annotations

import importlib
import threading
from typing import Any

from ..errors import BackendUnavailableError


class LazyBinding:
    """``nvmath.bindings.<name>``, imported once on the first call; a clear error naming what needs it."""

    def __init__(self, name: str, needed_by: str):
        """``needed_by`` starts the error, e.g. ``"cupygraph.linalg.spmm needs"``."""
        self.name, self.needed_by = name, needed_by
        self._module: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            if self._module is None:
                try:
                    self._module = importlib.import_module(f"nvmath.bindings.{self.name}")
                except Exception as err:
                    raise BackendUnavailableError(
                        f"{self.needed_by} nvmath-python (pip install nvmath-python): {type(err).__name__}: {err}"
                    ) from err
            return self._module
