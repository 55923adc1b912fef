"""Executables of one recording used in turn, so re-pointing never edits one that is still running.

Measured on an H100 (2026-11-26, ``tools/probe_output_rebind.py``): ``cuGraphExecKernelNodeSetParams``
on an executable whose last launch has not finished waits for it. A caller that keeps each result
until the next call (``y = f(x)`` in a loop) makes the output's address alternate between two
blocks, so every call re-pointed a busy executable: 52 µs of host time per call, against 6 µs when
the address repeats. A second instantiation of the same graph takes the other address: each
executable (a *bank*) keeps the pointers it was last given, and the binder launches the bank that
already holds this call's addresses (no update at all), else updates the one launched longest ago.

Node handles belong to the graph, not to an executable, so one ``KernelNode`` serves every bank.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ..logs import logger
from .cupy_rebind import executable_of
from .driver import bindings, ok

MAX_BANKS = 2
"""Two cover a caller that holds one result while the next is made; more would only spend memory."""


class Bank:
    """One executable per graph step, the addresses its nodes hold, and how to launch it."""

    __slots__ = ("_owned", "current", "executables", "fresh", "handle", "launch")

    def __init__(self, launch: Callable[[], None], executables: dict[int, ctypes.c_void_p], current: list[int],
                 owned: Sequence[int] = (), handle: int = 0):
        self.launch = launch
        self.handle = handle
        """The one executable ``launch`` launches, where it launches just one (else 0): the compiled
        replay (``cupy_fast``) launches it with ``cuGraphLaunch`` directly."""
        self.executables = executables
        """Handle of the first bank's executable (what ``KernelNode.executable`` names) -> this bank's."""
        self.current = current
        """Per binder slot, the address this bank's nodes hold."""
        self.fresh = True
        """Never launched: updating it cannot wait for a launch."""
        self._owned = list(owned)

    def destroy(self) -> None:
        """Destroy the executables this bank instantiated (the first bank's belong to CuPy's graphs).
        A launch still running finishes first: the driver frees an executable in flight on completion."""
        owned, self._owned = self._owned, []
        drv = bindings() if owned else None
        if drv is None:
            return
        for handle in owned:
            try:
                drv.cuGraphExecDestroy(drv.CUgraphExec(handle))
            except Exception:  # at interpreter exit the driver may be gone already
                pass

    def __del__(self) -> None:
        self.destroy()


def first_bank(steps: Sequence[Any], launch: Callable[[], None], current: list[int]) -> Bank:
    """The recording's own executables as a bank."""
    executables = {}
    for step in steps:
        handles = executable_of(step)
        if handles is not None:
            executables[handles[1]] = ctypes.c_void_p(handles[1])
    single = executable_of(steps[0]) if len(steps) == 1 else None
    return Bank(launch, executables, current, handle=single[1] if single else 0)


class _Executable:
    """A graph step launched through another instantiation of its graph."""

    __slots__ = ("bank", "graphExec")

    def __init__(self, handle: int):
        self.graphExec = handle
        self.bank: Optional[Bank] = None
        """Its bank, kept alive by whoever can still launch this (``recording.launch``)."""

    def launch(self, stream: Any = None) -> None:
        cupy.cuda.runtime.graphLaunch(self.graphExec, (cupy.cuda.get_current_stream() if stream is None
                                                       else stream).ptr)


def _launch_all(steps: Sequence[Any]) -> None:
    for step in steps:
        step.launch()


def another_bank(steps: Sequence[Any], current: list[int]) -> Optional[Bank]:
    """A new instantiation of every graph step (eager steps shared), uploaded on the current stream;
    None when the driver refuses one (the caller then keeps a single bank)."""
    drv = bindings()
    if drv is None:
        return None
    made: list[int] = []
    executables: dict[int, ctypes.c_void_p] = {}
    launched: list[Any] = []
    stream = cupy.cuda.get_current_stream().ptr
    try:
        for step in steps:
            handles = executable_of(step)
            if handles is None:
                launched.append(step)
                continue
            got = ok(drv.cuGraphInstantiate(drv.CUgraph(handles[0]), 0))
            if got is None:
                raise RuntimeError("cuGraphInstantiate refused a second executable")
            made.append(int(got[0]))
            executables[handles[1]] = ctypes.c_void_p(made[-1])
            cupy.cuda.runtime.graphUpload(made[-1], stream)  # so its first launch costs what later ones do
            launched.append(_Executable(made[-1]))
    except Exception as err:
        logger.debug("cupygraph: no second executable for alternating addresses: %s", err)
        Bank(_launch_nothing, {}, [], made).destroy()
        return None
    launch = launched[0].launch if len(launched) == 1 else functools.partial(_launch_all, tuple(launched))
    single = len(launched) == 1 and isinstance(launched[0], _Executable)
    bank = Bank(launch, executables, current, made, handle=made[0] if single else 0)
    for step in launched:
        if isinstance(step, _Executable):
            step.bank = bank  # a cycle on purpose: the executables outlive no launcher of theirs
    return bank


def _launch_nothing() -> None:
    pass
