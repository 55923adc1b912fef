"""The cuBLASLt entry points cupygraph's fused GEMMs call (``linalg.linear``, ``gemm(bias=, activation=)``).

Two bindings, chosen like cuBLAS's (``_binding``: ``CUPYGRAPH_CUBLAS_BINDING`` = auto | nvmath | ctypes):

* ``nvmath``: ``nvmath.bindings.cublasLt`` (nvmath-python), imported at the first fused product;
* ``ctypes``: a minimal binding to the libcublasLt in the process: libcublas depends on it, so once
  CuPy's cuBLAS module is imported it is in the memory map (``mapped_library``).

Both take and return plain ints (handles, descriptors, device and host addresses). Attribute values
are ctypes objects, passed by address and size, as ``cublasLt*SetAttribute`` reads them. Enum values
and attribute types are those of ``cublasLt.h`` (checked against nvmath-python's generated
``cycublasLt.pxd`` and its attribute-size tables; the GPU tests compare them with the installed nvmath).
The entry points are a table (``CublasLt``) that ``_library`` turns into either binding.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from ._library import Call, Library, TableBinding

# cublasLtEpilogue_t
EPILOGUE_DEFAULT, EPILOGUE_RELU, EPILOGUE_BIAS, EPILOGUE_GELU = 1, 2, 4, 32
EPILOGUE_RELU_BIAS, EPILOGUE_GELU_BIAS = EPILOGUE_RELU | EPILOGUE_BIAS, EPILOGUE_GELU | EPILOGUE_BIAS

# Attribute ids with the C type of their value (cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t,
# cublasLtMatmulPreferenceAttributes_t).
DESC_TRANSA = (3, ctypes.c_int32)
DESC_TRANSB = (4, ctypes.c_int32)
DESC_POINTER_MODE = (2, ctypes.c_int32)
DESC_EPILOGUE = (7, ctypes.c_uint32)
DESC_BIAS_POINTER = (8, ctypes.c_void_p)
LAYOUT_BATCH_COUNT = (5, ctypes.c_int32)
LAYOUT_STRIDED_BATCH_OFFSET = (6, ctypes.c_int64)
PREF_MAX_WORKSPACE_BYTES = (1, ctypes.c_uint64)
PREF_MIN_ALIGNMENT = {"a": (5, ctypes.c_uint32), "b": (6, ctypes.c_uint32), "c": (7, ctypes.c_uint32),
                      "d": (8, ctypes.c_uint32)}

STATUS_INVALID_VALUE, STATUS_NOT_SUPPORTED = 7, 15


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: an opaque 64-byte description of one kernel configuration."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [("algo", Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class LtBinding(Protocol):
    """What the fused GEMMs need from a cuBLASLt binding (handles, descriptors and pointers are ints)."""

    name: str
    library_path: str

    def create(self) -> int: ...
    def destroy(self, handle: int) -> None: ...
    def version(self) -> int: ...
    def desc_create(self, compute_type: int, scale_type: int) -> int: ...
    def desc_destroy(self, desc: int) -> None: ...
    def desc_set(self, desc: int, attr: int, value: Any) -> None: ...
    def layout_create(self, data_type: int, rows: int, cols: int, ld: int) -> int: ...
    def layout_destroy(self, layout: int) -> None: ...
    def layout_set(self, layout: int, attr: int, value: Any) -> None: ...
    def pref_create(self) -> int: ...
    def pref_destroy(self, pref: int) -> None: ...
    def pref_set(self, pref: int, attr: int, value: Any) -> None: ...
    def heuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int,
                  requested: int) -> list[Algo]:
        """Up to ``requested`` algorithms cuBLASLt's heuristic proposes, best guess first (none: empty)."""
    def matmul(self, handle: int, desc: int, alpha: int, a: int, a_layout: int, b: int, b_layout: int, beta: int,
               c: int, c_layout: int, d: int, d_layout: int, algo: int, workspace: int, workspace_bytes: int,
               stream: int) -> None: ...


_P, _I, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_SET = [_P, _I, _P, _SZ]  # object, attribute, address of the value, its size


class CublasLt(TableBinding):
    """cuBLASLt's entry points (cublasLt.h's prototypes; nvmath.bindings.cublasLt's names), through either
    binding. A ``*_create`` writes the object it makes through its first argument and returns it here."""

    create = Call("cublasLtCreate", "create", [_P], made=_P)
    destroy = Call("cublasLtDestroy", "destroy", [_P])
    version = Call("cublasLtGetVersion", "get_version", [], restype=_SZ)
    desc_create = Call("cublasLtMatmulDescCreate", "matmul_desc_create", [_P, _I, _I], made=_P)
    desc_destroy = Call("cublasLtMatmulDescDestroy", "matmul_desc_destroy", [_P])
    desc_set_address = Call("cublasLtMatmulDescSetAttribute", "matmul_desc_set_attribute", _SET)
    layout_create = Call("cublasLtMatrixLayoutCreate", "matrix_layout_create",
                         [_P, _I, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64], made=_P)
    layout_destroy = Call("cublasLtMatrixLayoutDestroy", "matrix_layout_destroy", [_P])
    layout_set_address = Call("cublasLtMatrixLayoutSetAttribute", "matrix_layout_set_attribute", _SET)
    pref_create = Call("cublasLtMatmulPreferenceCreate", "matmul_preference_create", [_P], made=_P)
    pref_destroy = Call("cublasLtMatmulPreferenceDestroy", "matmul_preference_destroy", [_P])
    pref_set_address = Call("cublasLtMatmulPreferenceSetAttribute", "matmul_preference_set_attribute", _SET)
    # handle, operation, A, B, C, D layouts, preference, requested count, results array, returned count
    heuristic_into = Call("cublasLtMatmulAlgoGetHeuristic", "matmul_algo_get_heuristic",
                          [_P, _P, _P, _P, _P, _P, _P, _I, _P, _P])
    # handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, its size, stream
    matmul = Call("cublasLtMatmul", "matmul", [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SZ, _P])

    # cublasLt*SetAttribute reads a value by address and size: these take the ctypes value itself.
    def desc_set(self, desc: int, attr: int, value: Any) -> None:
        self.desc_set_address(desc, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def layout_set(self, layout: int, attr: int, value: Any) -> None:
        self.layout_set_address(layout, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def pref_set(self, pref: int, attr: int, value: Any) -> None:
        self.pref_set_address(pref, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def heuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int,
                  requested: int) -> list[Algo]:
        results, count = (HeuristicResult * requested)(), ctypes.c_int(0)
        self.heuristic_into(handle, desc, a, b, c, d, pref, requested, ctypes.addressof(results),
                            ctypes.addressof(count))
        return [Algo.from_buffer_copy(result.algo) for result in results[:max(0, count.value)] if result.state == 0]


CUBLASLT = Library("cuBLASLt", "libcublasLt.so", "cublasLt", "cuBLASLtError", CublasLt)
