"""CSR @ dense and dense @ CSR on cuSPARSE's generic API (``cusparseSpMM``), eagerly or under a capture.

CuPy's ``csr_matrix @ dense`` (and ``dense @ csr``) goes through its own cuSPARSE binding, which
refuses a capturing stream. Here the call goes through ``nvmath.bindings.cusparse`` (imported at
the first call) on this thread's handle bound to the current stream: the matrix descriptors are
host objects made and destroyed around the call, work buffers are ordinary arrays of the current
allocator (the family's pool under ``jit``), sized before the call that uses them, and alpha = 1,
beta = 0 are host values (frozen into a graph). The handle is made outside any capture (the
warm-up makes it) and a recording holds it. The public checks (``_solvers.spmm``) ran before.

dense @ CSR: ``y = x @ s`` is ``y^T = s^T x^T``, and a C-ordered matrix is its transpose in column
order, so x and y are handed to SpMM as column-major views of themselves (no dense copy). SpMM on
a transposed sparse operand may sum in another order from run to run (cuSPARSE says so), which
would make replays differ from eager calls; so s^T is formed as CSR first (``csr2cscEx2``, inside
the same call and graph, so it always follows s's current values) and SpMM runs untransposed.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy

from ._nvmath import LazyBinding, ThreadHandles

_VALUE_TYPE = {"f": 0, "d": 1}  # CUDA_R_32F, CUDA_R_64F
_INDEX_32I, _BASE_ZERO, _ORDER_COL, _ORDER_ROW, _OP_N, _ALG_DEFAULT = 2, 0, 1, 2, 0, 0
_ACTION_NUMERIC, _CSR2CSC_ALG1 = 1, 1
_library = LazyBinding("cusparse", "cupygraph.linalg.spmm needs")


class _Handle:
    def __init__(self, lib: Any):
        self.lib, self.ptr, self.stream_ptr = lib, int(lib.create()), -1


_handles = ThreadHandles(lambda device_id: _Handle(_library()), "cuSPARSE", "cupygraph.linalg.spmm")
_handle = _handles.get


def _spmm(h: Any, sparse: tuple[int, int, int, Any, Any, Any], b: tuple[int, int, int, Any, int],
          c: tuple[int, int, int, Any, int], value_type: int, dtype: Any) -> None:
    """``C = A @ B`` (no transposes); A as (rows, cols, nnz, indptr, indices, data), B and C as
    (rows, cols, ld, array, order)."""
    lib = h.lib
    alpha, beta = numpy.ones((), dtype), numpy.zeros((), dtype)  # on the host: the call (and a capture) reads them now
    rows, cols, nnz, indptr, indices, data = sparse
    mat_a = lib.create_csr(rows, cols, nnz, indptr.data.ptr, indices.data.ptr, data.data.ptr, _INDEX_32I, _INDEX_32I,
                           _BASE_ZERO, value_type)
    mat_b = lib.create_dn_mat(b[0], b[1], b[2], b[3].data.ptr, value_type, b[4])
    mat_c = lib.create_dn_mat(c[0], c[1], c[2], c[3].data.ptr, value_type, c[4])
    try:
        args = (h.ptr, _OP_N, _OP_N, alpha.ctypes.data, mat_a, mat_b, beta.ctypes.data, mat_c, value_type, _ALG_DEFAULT)
        buffer = cupy.empty(max(int(lib.sp_mm_buffer_size(*args)), 1), dtype=cupy.uint8)
        lib.sp_mm(*args, buffer.data.ptr)
    finally:
        lib.destroy_sp_mat(mat_a)
        lib.destroy_dn_mat(mat_b)
        lib.destroy_dn_mat(mat_c)


def csr_dense(a: Any, b: Any, dtype: Any) -> Any:
    """``a @ b`` for a ``cupyx.scipy.sparse.csr_matrix`` a (M, K) and a 2-D CuPy array b (K, N)."""
    m, k = a.shape
    n = b.shape[1]
    with cupy.cuda.Device(b.device.id):
        data = a.data.astype(dtype, copy=False)
        dense = cupy.ascontiguousarray(b.astype(dtype, copy=False))
        out = cupy.empty((m, n), dtype=dtype)
        if a.nnz == 0 or n == 0 or m == 0:
            out.fill(0)
            return out
        _spmm(_handle(b.device.id), (m, k, a.nnz, a.indptr, a.indices, data), (k, n, n, dense, _ORDER_ROW),
              (m, n, n, out, _ORDER_ROW), _VALUE_TYPE[dtype.char], dtype)
    return out


def dense_csr(x: Any, s: Any, dtype: Any) -> Any:
    """``x @ s`` for a 2-D CuPy array x (M, K) and a ``cupyx.scipy.sparse.csr_matrix`` s (K, N)."""
    m, k = x.shape
    n = s.shape[1]
    with cupy.cuda.Device(x.device.id):
        data = s.data.astype(dtype, copy=False)
        dense = cupy.ascontiguousarray(x.astype(dtype, copy=False))
        out = cupy.empty((m, n), dtype=dtype)
        if s.nnz == 0 or n == 0 or m == 0:
            out.fill(0)
            return out
        h = _handle(x.device.id)
        value_type = _VALUE_TYPE[dtype.char]
        # s^T as CSR (N, K) is s as CSC: csr2cscEx2 writes it into arrays of this call.
        t_data = cupy.empty(s.nnz, dtype=dtype)
        t_indptr = cupy.empty(n + 1, dtype=cupy.int32)
        t_indices = cupy.empty(s.nnz, dtype=cupy.int32)
        args = (h.ptr, k, n, s.nnz, data.data.ptr, s.indptr.data.ptr, s.indices.data.ptr, t_data.data.ptr,
                t_indptr.data.ptr, t_indices.data.ptr, value_type, _ACTION_NUMERIC, _BASE_ZERO, _CSR2CSC_ALG1)
        buffer = cupy.empty(max(int(h.lib.csr2csc_ex2_buffer_size(*args)), 1), dtype=cupy.uint8)
        h.lib.csr2csc_ex2(*args, buffer.data.ptr)
        # y^T (N, M) = s^T (N, K) @ x^T (K, M); x^T and y^T are x and y read in column order.
        _spmm(h, (n, k, s.nnz, t_indptr, t_indices, t_data), (k, m, k, dense, _ORDER_COL),
              (n, m, n, out, _ORDER_COL), value_type, dtype)
    return out
