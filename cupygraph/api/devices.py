"""Which graph family serves a call: one per device a jitted function is used on.

A CUDA graph, its static buffers and its memory pool live on one device. A function called with
arrays on device 1 as well as device 0 gets a second family there (its own registry, backend,
pool and shortcuts), made on first use and kept for the function's lifetime; the function's own
family serves its backend's device. The device of a call is that of its first batched array (else
its first array); a call mixing devices is refused by the family's argument checks. As with
CuPy's own kernels, the caller makes the array's device current (``with cupy.cuda.Device(1):``):
the graph launches on the current stream, which must belong to that device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Optional, TypeVar

from ..backends.base import Backend

T = TypeVar("T")

__all__ = ["DeviceRouter"]


class DeviceRouter(Generic[T]):
    """The families of one function by device; ``make(device)`` builds one for another device."""

    def __init__(self, backend: Backend, batch_argnums: Sequence[int], home: T, make: Callable[[int], T]):
        self.home_device = backend.device_id
        # None where every array lives on one device (the host): the hot path then skips the check.
        self.device_of: Optional[Callable[[Any], int]] = backend.device_of if backend.per_device else None
        self._is_array = backend.is_array
        self._batch = tuple(batch_argnums)
        self._home = home
        self._make = make
        self._others: dict[int, T] = {}
        self._lock = threading.Lock()

    def device(self, args: Sequence[Any]) -> int:
        """The device of a call: its first batched array's, else its first array's, else the home device."""
        device_of = self.device_of
        if device_of is None:
            return self.home_device
        for i in self._batch:
            if i < len(args) and self._is_array(args[i]):
                return device_of(args[i])
        for arg in args:
            if self._is_array(arg):
                return device_of(arg)
        return self.home_device

    def elsewhere(self, args: Sequence[Any]) -> Optional[T]:
        """The family for this call's device when that is not the home device, else None."""
        if self.device_of is None:
            return None
        device = self.device(args)
        if device == self.home_device:
            return None
        with self._lock:
            family = self._others.get(device)
            if family is None:
                family = self._others[device] = self._make(device)
            return family

    def clear_others(self) -> None:
        """``clear()`` the families on other devices (they stay, empty)."""
        with self._lock:
            others = list(self._others.values())
        for family in others:
            family.clear()  # type: ignore[attr-defined]

    def families(self) -> dict[int, T]:
        """Every family by device, the home one included."""
        with self._lock:
            return {self.home_device: self._home, **self._others}
