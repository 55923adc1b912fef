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
``linalg.linear``) are bound in ``_lt_binding``, the same way and chosen by the same variable: both
are tables of entry points (``Cublas`` here) that ``_library`` turns into either binding.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from ._library import Call, Library, TableBinding, Via

# cuBLAS / CUDA library enums (cublas_api.h, library_types.h); the GPU tests check them against nvmath's.
OP_N, OP_T = 0, 1
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
GEMM_DEFAULT = -1
DATA_TYPE = {"e": 2, "f": 0, "d": 1, "F": 4, "D": 5}  # CUDA_R_16F, R_32F, R_64F, C_32F, C_64F
COMPUTE_TYPE = {"e": 68, "f": 68, "d": 70, "F": 68, "D": 70}  # CUBLAS_COMPUTE_32F / _64F (no TF32)


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
_BATCHED = [_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _I, _P, _P, _I, _I]
_GEAM = [_P, _I, _I, _I, _I, _P, _P, _I, _P, _P, _I, _P, _I]
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


class Cublas(TableBinding):
    """cuBLAS's entry points (cublas_api.h; nvmath.bindings.cublas's names), through either binding."""

    create = Call("cublasCreate_v2", "create", [_P], made=_P)
    destroy = Call("cublasDestroy_v2", "destroy", [_P])
    set_stream = Call("cublasSetStream_v2", "set_stream", [_P, _P])
    set_workspace = Call("cublasSetWorkspace_v2", "set_workspace", [_P, _P, _SZ])
    set_pointer_mode = Call("cublasSetPointerMode_v2", "set_pointer_mode", [_P, _I])
    version = Call("cublasGetVersion_v2", "get_version", [_P, _P], made=_I, made_at=1)
    gemm = Call("cublasGemmEx", "gemm_ex", [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I])
    gemm_strided_batched = Call("cublasGemmStridedBatchedEx", "gemm_strided_batched_ex",
                                [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _LL, _P, _I, _I, _LL, _P, _P, _I, _I, _LL,
                                 _I, _I, _I])
    gemm_batched = Call("cublasGemmBatchedEx", "gemm_batched_ex",
                        [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I, _I])

    def __init__(self, via: Via):
        super().__init__(via)
        self._routines = {name: via.prepare(Call(symbol, nvmath_name, types))
                          for name, (symbol, nvmath_name, types) in ROUTINES.items()}

    def routine(self, name: str, *args: int) -> None:
        self._routines[name](*args)


CUBLAS = Library("cuBLAS", "libcublas.so", "cublas", "cuBLASError", Cublas)


def load_binding(name: str) -> Binding:
    """The cuBLAS binding ``name`` (``auto``: nvmath where installed, else ctypes), loaded once per process.

    Raises ``BackendUnavailableError`` saying what is missing.
    """
    return CUBLAS.load(name)
