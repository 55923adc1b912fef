"""The cuBLASLt entry points cupygraph's fused GEMMs call (``linalg.linear``, ``gemm(bias=, activation=)``).

Two bindings, chosen like cuBLAS's (``_binding``: ``CUPYGRAPH_CUBLAS_BINDING`` = auto | nvmath | ctypes):

* ``nvmath``: ``nvmath.bindings.cublasLt`` (nvmath-python), imported at the first fused product;
* ``ctypes``: a minimal binding to the libcublasLt in the process: libcublas depends on it, so once
  CuPy's cuBLAS module is imported it is in the memory map (``mapped_library``).

Both take and return plain ints (handles, descriptors, device and host addresses). Attribute values
are ctypes objects, passed by address and size, as ``cublasLt*SetAttribute`` reads them. Enum values
and attribute types are those of ``cublasLt.h`` (checked against nvmath-python's generated
``cycublasLt.pxd`` and its attribute-size tables; the GPU tests compare them with the installed nvmath).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
from typing import Any, Protocol

from ..errors import BackendUnavailableError
from ._binding import BINDINGS, NVMATH_INSTALL, CublasError, mapped_library, requested_binding

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


def _proposed(results: Any, count: ctypes.c_int) -> list[Algo]:
    return [Algo.from_buffer_copy(result.algo) for result in results[:max(0, count.value)] if result.state == 0]


# -- ctypes: the libcublasLt libcublas loaded ------------------------------------------------------

_P, _I, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    # symbol: (return type, argument types), in cublasLt.h's order; out-parameters are addresses
    "cublasLtCreate": (_I, [_P]),
    "cublasLtDestroy": (_I, [_P]),
    "cublasLtGetVersion": (_SZ, []),
    "cublasLtMatmulDescCreate": (_I, [_P, _I, _I]),
    "cublasLtMatmulDescDestroy": (_I, [_P]),
    "cublasLtMatmulDescSetAttribute": (_I, [_P, _I, _P, _SZ]),
    "cublasLtMatrixLayoutCreate": (_I, [_P, _I, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]),
    "cublasLtMatrixLayoutDestroy": (_I, [_P]),
    "cublasLtMatrixLayoutSetAttribute": (_I, [_P, _I, _P, _SZ]),
    "cublasLtMatmulPreferenceCreate": (_I, [_P]),
    "cublasLtMatmulPreferenceDestroy": (_I, [_P]),
    "cublasLtMatmulPreferenceSetAttribute": (_I, [_P, _I, _P, _SZ]),
    # handle, operation, A, B, C, D layouts, preference, requested count, results array, returned count
    "cublasLtMatmulAlgoGetHeuristic": (_I, [_P, _P, _P, _P, _P, _P, _P, _I, _P, _P]),
    # handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, its size, stream
    "cublasLtMatmul": (_I, [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SZ, _P]),
}


class CtypesCublasLt:
    """cuBLASLt through ctypes, on the libcublasLt that CuPy's libcublas loaded."""

    name = "ctypes"

    def __init__(self, lib: Any = None, library_path: str = "") -> None:
        """``lib``: an already loaded library (tests pass a stand-in); else libcublasLt is found."""
        if lib is None:
            lib, library_path = _load_cublaslt()
        self.library_path = library_path
        self._fn: dict[str, Any] = {}
        for symbol, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(lib, symbol)
            fn.argtypes, fn.restype = argtypes, restype
            self._fn[symbol] = fn
        self._matmul = self._fn["cublasLtMatmul"]

    def _call(self, symbol: str, *args: Any) -> None:
        status = self._fn[symbol](*args)
        if status:
            raise CublasError(symbol, status)

    def _create(self, symbol: str, *args: Any) -> int:
        made = _P()
        self._call(symbol, ctypes.addressof(made), *args)
        return int(made.value or 0)

    def create(self) -> int:
        return self._create("cublasLtCreate")

    def destroy(self, handle: int) -> None:
        self._call("cublasLtDestroy", handle)

    def version(self) -> int:
        return int(self._fn["cublasLtGetVersion"]())

    def desc_create(self, compute_type: int, scale_type: int) -> int:
        return self._create("cublasLtMatmulDescCreate", compute_type, scale_type)

    def desc_destroy(self, desc: int) -> None:
        self._call("cublasLtMatmulDescDestroy", desc)

    def desc_set(self, desc: int, attr: int, value: Any) -> None:
        self._call("cublasLtMatmulDescSetAttribute", desc, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def layout_create(self, data_type: int, rows: int, cols: int, ld: int) -> int:
        return self._create("cublasLtMatrixLayoutCreate", data_type, rows, cols, ld)

    def layout_destroy(self, layout: int) -> None:
        self._call("cublasLtMatrixLayoutDestroy", layout)

    def layout_set(self, layout: int, attr: int, value: Any) -> None:
        self._call("cublasLtMatrixLayoutSetAttribute", layout, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def pref_create(self) -> int:
        return self._create("cublasLtMatmulPreferenceCreate")

    def pref_destroy(self, pref: int) -> None:
        self._call("cublasLtMatmulPreferenceDestroy", pref)

    def pref_set(self, pref: int, attr: int, value: Any) -> None:
        self._call("cublasLtMatmulPreferenceSetAttribute", pref, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def heuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int,
                  requested: int) -> list[Algo]:
        results, count = (HeuristicResult * requested)(), ctypes.c_int(0)
        self._call("cublasLtMatmulAlgoGetHeuristic", handle, desc, a, b, c, d, pref, requested,
                   ctypes.addressof(results), ctypes.addressof(count))
        return _proposed(results, count)

    def matmul(self, *args: int) -> None:
        status = self._matmul(*args)
        if status:
            raise CublasError("cublasLtMatmul", status)


def _load_cublaslt() -> tuple[Any, str]:
    try:
        import cupy_backends.cuda.libs.cublas  # noqa: F401  (loads CuPy's libcublas, and with it libcublasLt)
    except Exception as err:
        raise BackendUnavailableError(
            f"the ctypes cuBLASLt binding needs CuPy's libcublas: CuPy's cuBLAS module is not importable "
            f"({type(err).__name__}: {err})") from err
    path = mapped_library("libcublasLt.so")
    candidates = [path] if path else ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate), candidate
        except OSError:
            continue
    raise BackendUnavailableError(f"the ctypes cuBLASLt binding found no libcublasLt (tried {candidates})")


# -- nvmath-python ---------------------------------------------------------------------------------


class NvmathCublasLt:
    """cuBLASLt through ``nvmath.bindings.cublasLt``; its errors come back as ``CublasError``."""

    name = "nvmath"

    def __init__(self) -> None:
        try:  # by name: nvmath is optional and ships no type information
            lt = importlib.import_module("nvmath.bindings.cublasLt")
        except Exception as err:
            raise BackendUnavailableError(
                f"the nvmath cuBLASLt binding needs nvmath-python ({NVMATH_INSTALL}): "
                f"{type(err).__name__}: {err}") from err
        self._lib = lt
        self._error: type[BaseException] = getattr(lt, "cuBLASLtError", Exception)
        self.library_path = mapped_library("libcublasLt.so") or "libcublasLt (loaded by nvmath)"

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._lib, name)(*args)
        except self._error as err:
            raise CublasError(f"nvmath.bindings.cublasLt.{name}", int(getattr(err, "status", -1))) from err

    def create(self) -> int:
        return int(self._call("create"))

    def destroy(self, handle: int) -> None:
        self._call("destroy", handle)

    def version(self) -> int:
        return int(self._call("get_version"))

    def desc_create(self, compute_type: int, scale_type: int) -> int:
        return int(self._call("matmul_desc_create", compute_type, scale_type))

    def desc_destroy(self, desc: int) -> None:
        self._call("matmul_desc_destroy", desc)

    def desc_set(self, desc: int, attr: int, value: Any) -> None:
        self._call("matmul_desc_set_attribute", desc, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def layout_create(self, data_type: int, rows: int, cols: int, ld: int) -> int:
        return int(self._call("matrix_layout_create", data_type, rows, cols, ld))

    def layout_destroy(self, layout: int) -> None:
        self._call("matrix_layout_destroy", layout)

    def layout_set(self, layout: int, attr: int, value: Any) -> None:
        self._call("matrix_layout_set_attribute", layout, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def pref_create(self) -> int:
        return int(self._call("matmul_preference_create"))

    def pref_destroy(self, pref: int) -> None:
        self._call("matmul_preference_destroy", pref)

    def pref_set(self, pref: int, attr: int, value: Any) -> None:
        self._call("matmul_preference_set_attribute", pref, attr, ctypes.addressof(value), ctypes.sizeof(value))

    def heuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int,
                  requested: int) -> list[Algo]:
        results, count = (HeuristicResult * requested)(), ctypes.c_int(0)
        self._call("matmul_algo_get_heuristic", handle, desc, a, b, c, d, pref, requested, ctypes.addressof(results),
                   ctypes.addressof(count))
        return _proposed(results, count)

    def matmul(self, *args: int) -> None:
        self._call("matmul", *args)


@functools.cache
def load_lt_binding(name: str) -> LtBinding:
    """The cuBLASLt binding ``name`` (``auto``: nvmath where installed, else ctypes), loaded once."""
    if name not in BINDINGS:
        raise ValueError(f"unknown cuBLAS binding {name!r}; valid: {', '.join(BINDINGS)}")
    if name == "nvmath":
        return NvmathCublasLt()
    if name == "ctypes":
        return CtypesCublasLt()
    try:
        return load_lt_binding("nvmath")
    except BackendUnavailableError:
        return load_lt_binding("ctypes")


def lt_binding() -> LtBinding:
    """The cuBLASLt binding of this process: the one ``CUPYGRAPH_CUBLAS_BINDING`` names, as for cuBLAS."""
    return load_lt_binding(requested_binding())
