"""Layer 3, backends: they record and replay (host reference, CuPy), guard host arrays, watch
foreign memory and own a family's pool memory; ``select_backend`` picks one from the config's
``backend`` field.

May import foundation, config and dispatch only; never control_flow, cache or anything above.
CuPy is imported only when a GPU backend is used.
"""

from __future__ import annotations

import functools
from typing import Optional

from ..errors import BackendUnavailableError
from ..logs import logger
from .base import Backend, Recording
from .host.backend import HostBackend


@functools.cache
def gpu_unavailable_reason() -> Optional[str]:
    """None when CuPy can run kernels on a GPU here; otherwise why not, in words."""
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken CUDA install raising at import
        return f"CuPy is not importable ({type(err).__name__}: {err})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        return f"no usable CUDA driver ({type(err).__name__}: {err})"
    if count < 1:
        return "no CUDA device found"
    return None


def gpu_available() -> bool:
    return gpu_unavailable_reason() is None


def select_backend(name: str = "auto") -> Backend:
    """A new backend instance (each owns one graph family's memory pool)."""
    if name == "host":
        return HostBackend()
    reason = gpu_unavailable_reason()
    if name == "cupy":
        if reason is not None:
            raise BackendUnavailableError(f"backend='cupy' was asked for but {reason}; use backend='host' or 'auto'")
    elif name != "auto":
        raise ValueError(f"unknown backend {name!r}; valid backends: auto, cupy, host")
    if reason is None:
        from .cupy.backend import CupyBackend

        backend = CupyBackend()
        if name == "auto":
            _log_gpu_choice(backend.device_id)
        return backend
    _log_host_choice(reason)
    return HostBackend()


@functools.cache
def _log_gpu_choice(device_id: int) -> None:
    logger.info("backend='auto' uses CuPy stream capture on device %d", device_id)


@functools.cache
def _log_host_choice(reason: str) -> None:
    logger.info("backend='auto' uses the NumPy host backend: %s", reason)


__all__ = ["Backend", "HostBackend", "Recording", "gpu_available", "gpu_unavailable_reason", "select_backend"]
