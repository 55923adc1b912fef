"""The CUDA driver, as cupygraph's GPU backend reaches it: cuda-bindings for reading and editing graphs,
and libcuda itself (ctypes) for the two calls the replay path makes without a Python wrapper.

Every module that talks to the driver asks here; nothing here may fail a capture: where cuda-bindings
or libcuda is missing, ``bindings()`` / ``libcuda()`` give None and the callers keep CuPy's defaults.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Optional

__all__ = ["allocation_of", "bindings", "graph_launch_address", "libcuda", "ok", "set_params_function"]


@functools.cache
def bindings() -> Any:
    """``cuda.bindings.driver``, or None where it is not installed or cannot load the driver."""
    try:
        from cuda.bindings import driver
    except Exception:  # ImportError, or bindings that cannot load the driver
        return None
    return driver if hasattr(driver, "cuGraphGetNodes") else None


def ok(result: Any) -> Optional[tuple[Any, ...]]:
    """The values after a cuda-bindings call's error code, or None when the call failed."""
    parts = result if isinstance(result, tuple) else (result,)
    if parts[0] != bindings().CUresult.CUDA_SUCCESS:
        return None
    return tuple(parts[1:])


def allocation_of(address: int) -> Optional[tuple[int, int]]:
    """(base, size) of the live device allocation holding ``address``, or None."""
    drv = bindings()
    got = ok(drv.cuMemGetAddressRange(drv.CUdeviceptr(address)))
    if got is None:
        return None
    base, size = got
    return int(base), int(size)


@functools.cache
def libcuda() -> Optional[ctypes.PyDLL]:
    """The driver library itself, for the calls the replay path makes without cuda-bindings."""
    try:
        return ctypes.PyDLL("libcuda.so.1")
    except OSError:
        return None


@functools.cache
def graph_launch_address() -> int:
    """Where ``cuGraphLaunch`` is (0 where it is not found): the compiled replay launches an executable
    with it, as ``Graph.launch`` does through the runtime, without the Python call around it."""
    fn = getattr(libcuda(), "cuGraphLaunch", None)
    return (ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn is not None else 0


@functools.cache
def set_params_function() -> Any:
    """``cuGraphExecKernelNodeSetParams`` from libcuda, called without releasing the GIL (cheaper)."""
    lib = libcuda()
    if lib is None:
        return None
    for name in ("cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            return fn
    return None
