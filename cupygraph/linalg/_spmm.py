"""CSR @ dense on cuSPARSE's generic API (``cusparseSpMM``), eagerly or under a CUDA graph capture.

CuPy's ``csr_matrix @ dense`` goes through its own cuSPARSE binding, which refuses a capturing
stream. Here the call goes through ``nvmath.bindings.cusparse`` (imported at the first call) on
this thread's handle bound to the current stream: the matrix descriptors are host objects made
and destroyed around the call, the work buffer is an ordinary array of the current allocator (the
family's pool under ``jit``), and alpha = 1, beta = 0 are host values (frozen into a graph). The
handle is made outside any capture (the warm-up makes it) and a recording holds it.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy

from ._nvmath import LazyBinding, ThreadHandles

_VALUE_TYPE = {"f": 0, "d": 1}  # CUDA_R_32F, CUDA_R_64F
_INDEX_32I, _BASE_ZERO, _ORDER_ROW, _OP_N, _ALG_DEFAULT = 2, 0, 2, 0, 0
_library = LazyBinding("cusparse", "cupygraph.linalg.spmm needs")



class _Handle:
    def __init__(self, lib: Any):
        self.lib, self.ptr, self.stream_ptr = lib, int(lib.create()), -1


_handles = ThreadHandles(lambda device_id: _Handle(_library()), "cuSPARSE", "cupygraph.linalg.spmm")
_handle = _handles.get


def spmm(a: Any, b: Any) -> Any:
    """``a @ b`` for a ``cupyx.scipy.sparse.csr_matrix`` a (M, K) and a 2-D CuPy array b (K, N)."""
    what = "cupygraph.linalg.spmm"
    if getattr(a, "format", None) != "csr":
        raise TypeError(f"{what}: argument 'a' must be a cupyx.scipy.sparse.csr_matrix, got {type(a).__name__}; "
                        "convert with a.tocsr()")
    if not isinstance(b, cupy.ndarray) or b.ndim != 2 or b.shape[0] != a.shape[1]:
        raise ValueError(f"{what}: b must be a 2-D CuPy array of {a.shape[1]} rows (a is {a.shape}), got "
                         f"{getattr(b, 'shape', type(b).__name__)}")
    dtype = numpy.result_type(a.dtype, b.dtype)
    value_type = _VALUE_TYPE.get(dtype.char)
    if value_type is None:
        raise TypeError(f"{what}: float32 and float64 are supported, got {dtype}; cast first")
    m, k = a.shape
    n = b.shape[1]
    with cupy.cuda.Device(b.device.id):
        data = a.data.astype(dtype, copy=False)
        dense = cupy.ascontiguousarray(b.astype(dtype, copy=False))
        out = cupy.empty((m, n), dtype=dtype)
        if a.nnz == 0 or n == 0:
            out.fill(0)
            return out
        h = _handle(b.device.id)
        lib = h.lib
        # alpha and beta live on the host: the call (and a capture) reads them now.
        alpha, beta = numpy.ones((), dtype), numpy.zeros((), dtype)
        mat_a = lib.create_csr(m, k, a.nnz, a.indptr.data.ptr, a.indices.data.ptr, data.data.ptr, _INDEX_32I,
                               _INDEX_32I, _BASE_ZERO, value_type)
        mat_b = lib.create_dn_mat(k, n, n, dense.data.ptr, value_type, _ORDER_ROW)
        mat_c = lib.create_dn_mat(m, n, n, out.data.ptr, value_type, _ORDER_ROW)
        try:
            args = (h.ptr, _OP_N, _OP_N, alpha.ctypes.data, mat_a, mat_b, beta.ctypes.data, mat_c, value_type,
                    _ALG_DEFAULT)
            size = int(lib.sp_mm_buffer_size(*args))
            buffer = cupy.empty(max(size, 1), dtype=cupy.uint8)
            lib.sp_mm(*args, buffer.data.ptr)
        finally:
            lib.destroy_sp_mat(mat_a)
            lib.destroy_dn_mat(mat_b)
            lib.destroy_dn_mat(mat_c)
    return out
