"""CSR @ dense and dense @ CSR on cuSPARSE's generic API (``cusparseSpMM``), eagerly or under a capture.

CuPy's ``csr_matrix @ dense`` (and ``dense @ csr``) goes through its own cuSPARSE binding, which
refuses a capturing stream. Here the call goes through ``nvmath.bindings.cusparse`` (imported at
the first call) on this thread's handle bound to the current stream: the matrix descriptors are
host objects made and destroyed around the call, work buffers are ordinary arrays of the current
allocator (the family's pool under ``jit``), sized before the call that uses them, and alpha = 1,
beta = 0 are host values (frozen into a graph). The handle is made outside any capture (the
warm-up makes it) and a recording holds it. The public checks (``_public_solvers.spmm``) ran before.

dense @ CSR is ``(s^T @ x^T)^T``: see ``dense_csr``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
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

    def closer(self) -> Callable[[], None]:
        return functools.partial(self.lib.destroy, self.ptr)


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


def _int32(index: Any) -> Any:
    """A CSR index array as the int32 one cuSPARSE is given here (cupyx also makes int64 ones; their
    values fit, since ``_public_solvers`` refused sizes over int32)."""
    return index.astype(cupy.int32, copy=False)


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
        _spmm(_handle(b.device.id), (m, k, a.nnz, _int32(a.indptr), _int32(a.indices), data),
              (k, n, n, dense, _ORDER_ROW), (m, n, n, out, _ORDER_ROW), _VALUE_TYPE[dtype.char], dtype)
    return out


def _transposed(s: Any, dtype: Any) -> tuple[Any, Any, Any]:
    """s^T (N, K) as CSR arrays (indptr, indices, data) of this call, from CuPy kernels only (a
    search, a sort on unique keys, gathers): deterministic, and they capture."""
    rows_of_s, cols_of_s = s.shape
    indptr_of_s, indices_of_s = _int32(s.indptr), _int32(s.indices)
    position = cupy.arange(s.nnz, dtype=cupy.int32)
    row = (cupy.searchsorted(indptr_of_s, position, side="right") - 1).astype(cupy.int32)
    order = cupy.argsort(indices_of_s.astype(cupy.int64) * rows_of_s + row)  # by column, then row
    column = indices_of_s[order]
    indptr = cupy.searchsorted(column, cupy.arange(cols_of_s + 1, dtype=column.dtype), side="left")
    return indptr.astype(cupy.int32), row[order], s.data.astype(dtype, copy=False)[order]


def dense_csr(x: Any, s: Any, dtype: Any) -> Any:
    """``x @ s`` for a 2-D CuPy array x (M, K) and a ``cupyx.scipy.sparse.csr_matrix`` s (K, N).

    Computed as ``(s^T @ x^T)^T`` with s^T formed as CSR inside the call (so it always follows s's
    current values) and SpMM untransposed on row-major operands, as ``csr_dense`` runs it; x^T and
    the result are transposed copies (elementwise kernels). The shortcuts without those copies
    were not bit-reproducible from run to run on an H100 (CUDA 13.2, cuSPARSE; ``tools/
    probe_cusolver_capture.py`` at 357e924), so replays would differ from eager calls: SpMM on the transposed
    s (as cuSPARSE documents), and SpMM on column-major views of x and the result (with s^T built
    by cupyx); with s^T from csr2cscEx2 that form even failed (cudaErrorInvalidAddressSpace).
    """
    m, k = x.shape
    n = s.shape[1]
    with cupy.cuda.Device(x.device.id):
        out = cupy.empty((m, n), dtype=dtype)
        if s.nnz == 0 or n == 0 or m == 0:
            out.fill(0)
            return out
        indptr, indices, data = _transposed(s, dtype)
        x_t = cupy.empty((k, m), dtype=dtype)
        x_t[...] = x.T  # one elementwise copy (and cast)
        out_t = cupy.empty((n, m), dtype=dtype)
        _spmm(_handle(x.device.id), (n, k, s.nnz, indptr, indices, data), (k, m, m, x_t, _ORDER_ROW),
              (n, m, m, out_t, _ORDER_ROW), _VALUE_TYPE[dtype.char], dtype)
        out[...] = out_t.T
    return out
