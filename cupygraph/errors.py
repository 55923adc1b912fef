"""The exceptions cupygraph raises, as one small hierarchy callers can catch precisely."""

from __future__ import annotations


class CupyGraphError(Exception):
    """Base class of every error cupygraph raises on purpose."""


class ConfigError(CupyGraphError, ValueError):
    """A configuration value, file or field is invalid; the message names the file and field."""


class CaptureError(CupyGraphError, RuntimeError):
    """A function could not be recorded into a CUDA graph; the message names the op and why."""


class InputMismatchError(CupyGraphError, ValueError):
    """An argument does not match what the graph was captured with (shape, dtype, device, pointer)."""


class AliasedWrite(InputMismatchError):
    """Two array arguments share memory and the function writes into one of them.

    Eager execution sees the write through both; a graph reading copies of them cannot, so such a
    call never replays (``jit`` runs it eagerly, counted under ``aliased_write``).
    """


class StaleOutputError(CupyGraphError, RuntimeError):
    """A view returned by ``output_mode="view"`` was used after its graph replayed again."""


class BackendUnavailableError(CupyGraphError, RuntimeError):
    """The requested backend cannot run here (no CuPy, no driver, no device)."""
