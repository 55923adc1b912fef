"""The cuBLAS entry points cupygraph calls, through one of two bindings.

* ``nvmath``: NVIDIA's maintained bindings, ``nvmath.bindings.cublas`` (nvmath-python), typed
  Cython wrappers. Importing them imports all of nvmath, so it happens at the first product on
  the GPU, never at ``import cupygraph``. nvmath finds libcublas itself (cuda-pathfinder); on the
  GPU machine it mapped the very file CuPy uses, so one copy of cuBLAS is loaded.
* ``ctypes``: a minimal binding to the libcublas CuPy has loaded (found in the process's memory
  map after CuPy's cuBLAS module is imported); it needs nothing beyond CuPy.

Why ``auto`` (the default; ``CUPYGRAPH_CUBLAS_BINDING`` = auto | nvmath | ctypes) takes nvmath
where it is installed and ctypes otherwise, measured with ``tools/probe_cublas.py`` (at commit 357e924) on an H200
(CUDA 13.2, cuBLAS 13.1, CuPy 14.2, nvmath-python 1.0.0; 2026-11-26): both capture a GEMM into a
graph next to a CuPy kernel, and three replays on fresh data equal eager calls bit for bit under
both; in graphs they cost the same (a (64x1024)@(1024x1024) float32 GEMM: 11.8 µs of GPU time
per replay with nvmath, 12.2 µs with ctypes, in one process). nvmath is the maintained binding the
issue prefers and its calls are cheaper (eager ``cupygraph.matmul`` of 64x64: 31.5 µs of host time
per call against 34.4 µs; ``cupy.matmul``: 15.5 µs), but its import costs 0.38 s on top of CuPy
and cupygraph and it is an extra install, so without it the ctypes binding (import 3 ms) serves.
Eager host time is mostly cupygraph's Python (shape checks, the GEMM call's layout, handle binding), not the
binding; a graph replays the GEMM with no Python at all.

Only these calls are bound: handle create/destroy, stream, workspace, pointer mode, version, and
``cublasGemmEx`` / ``cublasGemmStridedBatchedEx`` / ``cublasGemmBatchedEx``, which cover every
supported dtype through (data type, compute type) pairs; and ``ROUTINES``, the typed routines CuPy
itself calls that have no (data type, compute type) form, for the calls ``routes/cupy_libraries.py``
routes with CuPy's own arguments (``routine``). cuBLASLt's entry points (the fused GEMMs of
``linalg.linear``) are bound in ``_lt_binding``, the same way and chosen by the same variable.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import re
from typing import Any, Optional, Protocol

from ..errors import BackendUnavailableError, CupyGraphError

# cuBLAS / CUDA library enums (cublas_api.h, library_types.h); the GPU tests check them against nvmath's.
OP_N, OP_T = 0, 1
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
GEMM_DEFAULT = -1
DATA_TYPE = {"e": 2, "f": 0, "d": 1, "F": 4, "D": 5}  # CUDA_R_16F, R_32F, R_64F, C_32F, C_64F
COMPUTE_TYPE = {"e": 68, "f": 68, "d": 70, "F": 68, "D": 70}  # CUBLAS_COMPUTE_32F / _64F (no TF32)

_STATUS = {
    1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}
BINDINGS = ("auto", "nvmath", "ctypes")
ENV = "CUPYGRAPH_CUBLAS_BINDING"
# nvmath-python comes with the GPU extras (setup.cfg): an error for a missing one says how to get it.
NVMATH_INSTALL = "pip install 'cupygraph[cuda13]' (or [cuda12]), or pip install nvmath-python"


class CublasError(CupyGraphError, RuntimeError):
    """A cuBLAS call returned an error status."""

    def __init__(self, call: str, status: int):
        super().__init__(f"{call} failed with {_STATUS.get(status, 'cuBLAS status')} ({status})")
        self.call, self.status = call, status


class Binding(Protocol):
    """What ``cupygraph.linalg`` needs from a cuBLAS binding (handles and pointers are ints)."""

    name: str
    library_path: str

    def create(self) -> int: ...
    def destroy(self, handle: int) -> None: ...
    def set_stream(self, handle: int, stream: int) -> None: ...
    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None: ...
    def set_pointer_mode(self, handle: int, mode: int) -> None: ...
    def version(self, handle: int) -> int: ...
    def gemm(self, handle: int, ta: int, tb: int, m: int, n: int, k: int, alpha: int, a: int, atype: int,
             lda: int, b: int, btype: int, ldb: int, beta: int, c: int, ctype: int, ldc: int, compute: int,
             algo: int) -> None: ...
    def gemm_strided_batched(self, handle: int, ta: int, tb: int, m: int, n: int, k: int, alpha: int, a: int,
                             atype: int, lda: int, sa: int, b: int, btype: int, ldb: int, sb: int, beta: int, c: int,
                             ctype: int, ldc: int, sc: int, count: int, compute: int, algo: int) -> None: ...
    def gemm_batched(self, handle: int, ta: int, tb: int, m: int, n: int, k: int, alpha: int, a: int, atype: int,
                     lda: int, b: int, btype: int, ldb: int, beta: int, c: int, ctype: int, ldc: int, count: int,
                     compute: int, algo: int) -> None: ...
    def routine(self, name: str, *args: int) -> None:
        """One of ``ROUTINES`` by CuPy's name (``"sgemmBatched"``), with cuBLAS's arguments."""


_P, _I, _LL, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
_BATCHED = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_int, ctypes.c_int]
_GEAM = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_LU = {  # the batched LU routines CuPy's det, slogdet, inv and solve of stacked matrices call
    "getrfBatched": [_P, _I, _P, _I, _P, _P, _I],
    "getriBatched": [_P, _I, _P, _I, _P, _P, _I, _P, _I],
    "getrsBatched": [_P, _I, _I, _I, _P, _I, _P, _P, _I, _P, _I],
}
ROUTINES: dict[str, tuple[str, str, list[Any]]] = {
    # CuPy's name: (cuBLAS symbol, nvmath.bindings.cublas name, ctypes argument types), arguments in cuBLAS's order
    **{f"{t}gemmBatched": (f"cublas{t.upper()}gemmBatched", f"{t}gemm_batched", _BATCHED) for t in "sdcz"},
    **{f"{t}geam": (f"cublas{t.upper()}geam", f"{t}geam", _GEAM) for t in "sd"},
    **{f"{t}{name}": (f"cublas{t.upper()}{name}", f"{t}{name[:5]}_batched", types)
       for t in "sdcz" for name, types in _LU.items()},
}


def library_in_maps(maps: str, stem: str = "libcublas.so") -> Optional[str]:
    """The path of the first mapped file named ``stem``* (not cublasLt) in a /proc/<pid>/maps text."""
    pattern = re.compile(r"(/\S*/" + re.escape(stem) + r"[\w.]*)$")
    for line in maps.splitlines():
        found = pattern.search(line.strip())
        if found:
            return found.group(1)
    return None


def mapped_library(stem: str) -> Optional[str]:
    """The loaded library file named ``stem``* in this process's memory map, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return library_in_maps(maps.read(), stem)
    except OSError:  # not Linux: fall back to the loader's search
        return None


# -- ctypes: the libcublas CuPy loaded --------------------------------------------------------------

_SIGNATURES: dict[str, list[Any]] = {
    "cublasCreate_v2": [ctypes.POINTER(_P)],
    "cublasDestroy_v2": [_P],
    "cublasSetStream_v2": [_P, _P],
    "cublasSetWorkspace_v2": [_P, _P, _SZ],
    "cublasSetPointerMode_v2": [_P, _I],
    "cublasGetVersion_v2": [_P, ctypes.POINTER(_I)],
    "cublasGemmEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I],
    "cublasGemmStridedBatchedEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _LL, _P, _I, _I, _LL, _P, _P, _I, _I,
                                   _LL, _I, _I, _I],
    "cublasGemmBatchedEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I, _I],
}


class CtypesCublas:
    """cuBLAS through ctypes, on the libcublas CuPy itself loaded."""

    name = "ctypes"

    def __init__(self) -> None:
        try:
            import cupy_backends.cuda.libs.cublas  # noqa: F401  (loads CuPy's libcublas into the process)
        except Exception as err:
            raise BackendUnavailableError(
                f"the ctypes cuBLAS binding needs CuPy's libcublas: CuPy's cuBLAS module is not importable "
                f"({type(err).__name__}: {err})") from err
        path = mapped_library("libcublas.so")
        candidates = [path] if path else ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
        lib = None
        for candidate in candidates:
            try:
                lib = ctypes.CDLL(candidate)
                break
            except OSError:
                continue
        if lib is None:
            raise BackendUnavailableError(f"the ctypes cuBLAS binding found no libcublas (tried {candidates})")
        self.library_path = path or candidates[0]
        self._fn: dict[str, Any] = {}
        signatures = {**_SIGNATURES, **{symbol: types for symbol, _, types in ROUTINES.values()}}
        for symbol, argtypes in signatures.items():
            fn = getattr(lib, symbol)
            fn.argtypes, fn.restype = argtypes, _I
            self._fn[symbol] = fn
        fns = self._fn
        self._gemm, self._strided, self._batched = fns["cublasGemmEx"], fns["cublasGemmStridedBatchedEx"], \
            fns["cublasGemmBatchedEx"]

    def _call(self, symbol: str, *args: Any) -> None:
        status = self._fn[symbol](*args)
        if status:
            raise CublasError(symbol, status)

    def create(self) -> int:
        handle = _P()
        self._call("cublasCreate_v2", ctypes.byref(handle))
        return int(handle.value or 0)

    def destroy(self, handle: int) -> None:
        self._call("cublasDestroy_v2", handle)

    def set_stream(self, handle: int, stream: int) -> None:
        self._call("cublasSetStream_v2", handle, stream)

    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None:
        self._call("cublasSetWorkspace_v2", handle, ptr, nbytes)

    def set_pointer_mode(self, handle: int, mode: int) -> None:
        self._call("cublasSetPointerMode_v2", handle, mode)

    def version(self, handle: int) -> int:
        value = _I()
        self._call("cublasGetVersion_v2", handle, ctypes.byref(value))
        return int(value.value)

    def gemm(self, *args: int) -> None:
        status = self._gemm(*args)
        if status:
            raise CublasError("cublasGemmEx", status)

    def gemm_strided_batched(self, *args: int) -> None:
        status = self._strided(*args)
        if status:
            raise CublasError("cublasGemmStridedBatchedEx", status)

    def gemm_batched(self, *args: int) -> None:
        status = self._batched(*args)
        if status:
            raise CublasError("cublasGemmBatchedEx", status)

    def routine(self, name: str, *args: int) -> None:
        self._call(ROUTINES[name][0], *args)


# -- nvmath-python ---------------------------------------------------------------------------------


class NvmathCublas:
    """cuBLAS through ``nvmath.bindings.cublas``; its errors come back as ``CublasError``."""

    name = "nvmath"

    def __init__(self) -> None:
        try:  # by name: nvmath is optional and ships no type information
            cublas = importlib.import_module("nvmath.bindings.cublas")
        except Exception as err:
            raise BackendUnavailableError(
                f"the nvmath cuBLAS binding needs nvmath-python ({NVMATH_INSTALL}): "
                f"{type(err).__name__}: {err}") from err
        self._lib = cublas
        self._error: type[BaseException] = getattr(cublas, "cuBLASError", Exception)
        self.library_path = mapped_library("libcublas.so") or "libcublas (loaded by nvmath)"

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._lib, name)(*args)
        except self._error as err:
            raise CublasError(f"nvmath.bindings.cublas.{name}", int(getattr(err, "status", -1))) from err

    def create(self) -> int:
        return int(self._call("create"))

    def destroy(self, handle: int) -> None:
        self._call("destroy", handle)

    def set_stream(self, handle: int, stream: int) -> None:
        self._call("set_stream", handle, stream)

    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None:
        self._call("set_workspace", handle, ptr, nbytes)

    def set_pointer_mode(self, handle: int, mode: int) -> None:
        self._call("set_pointer_mode", handle, mode)

    def version(self, handle: int) -> int:
        return int(self._call("get_version", handle))

    def gemm(self, *args: int) -> None:
        self._call("gemm_ex", *args)

    def gemm_strided_batched(self, *args: int) -> None:
        self._call("gemm_strided_batched_ex", *args)

    def gemm_batched(self, *args: int) -> None:
        self._call("gemm_batched_ex", *args)

    def routine(self, name: str, *args: int) -> None:
        self._call(ROUTINES[name][1], *args)


# -- choosing one ----------------------------------------------------------------------------------


def requested_binding() -> str:
    """The binding asked for through ``CUPYGRAPH_CUBLAS_BINDING`` (default ``auto``)."""
    name = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if name not in BINDINGS:
        raise ValueError(f"{ENV}={name!r} is not a cuBLAS binding; valid: {', '.join(BINDINGS)}")
    return name


@functools.cache
def load_binding(name: str) -> Binding:
    """The binding ``name`` (``auto``: nvmath where installed, else ctypes), loaded once per process.

    Raises ``BackendUnavailableError`` saying what is missing.
    """
    if name not in BINDINGS:
        raise ValueError(f"unknown cuBLAS binding {name!r}; valid: {', '.join(BINDINGS)}")
    if name == "nvmath":
        return NvmathCublas()
    if name == "ctypes":
        return CtypesCublas()
    try:
        return load_binding("nvmath")
    except BackendUnavailableError:
        return load_binding("ctypes")


def binding() -> Binding:
    """The binding this process uses (``CUPYGRAPH_CUBLAS_BINDING``, read at the first product)."""
    return load_binding(requested_binding())
