"""``eigh`` and ``svd`` of CuPy arrays on cuSOLVER, eagerly or under a CUDA graph capture.

``_spectral_routines`` names the routine: up to 32 x 32, ``eigh`` runs XsyevBatched (64-bit API) and ``svd``
gesvdjBatched (Jacobi), each on one matrix, which capture; larger matrices run ``syevd`` /
``gesvd``, which fail under stream capture and are refused before any call (the key runs
eagerly, and the handle stays usable). The same routine runs eagerly and in a graph.
As in ``_cusolver``: the input is copied into a Fortran-ordered work array, workspaces and
``info`` are arrays of the current allocator, the params objects were made with the handle
(outside any capture), and a failure (no convergence, or a NaN value) is NaN results plus a
non-zero ``info``, never an exception inside a graph.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy

from ..backends.capturing import stream_is_capturing
from ..errors import CaptureError
from ..reasons import FallbackReason
from . import _spectral_routines
from ._cusolver import LOWER, UPPER, float_dtype, fortran_copy, handle, new_info, poison_on_failure, routine_name

EIG_MODE_VECTOR = 1
_DATA_TYPE = {"f": 0, "d": 1}  # CUDA_R_32F, CUDA_R_64F


def _refuse_under_capture(what: str, name: str, dtype: Any, shape: tuple[int, ...]) -> None:
    reason = _spectral_routines.refusal(what, name, dtype, shape)
    if reason is not None and stream_is_capturing(cupy.cuda.get_current_stream()):
        raise CaptureError(f"{FallbackReason.LIBRARY_CALL.text}: {reason}")


def _sizes(h: Any, key: tuple[Any, ...], routine: str, *args: Any) -> Any:
    """The workspace size ``routine`` reports, asked once per handle and shape: the warm-up asks,
    so a capture never calls a buffer-size query (the probe checked the routines, not those)."""
    found = h.workspace_sizes.get(key)
    if found is None:
        found = h.workspace_sizes[key] = h.call(routine, *args)
    return found


def _nan_is_a_failure(info: Any, values: Any) -> None:
    """A NaN eigen/singular value counts as a failure in ``info`` (the probe saw syevjBatched return
    NaN with info 0), so ``check(info)`` reports it and every output becomes NaN."""
    info += cupy.isnan(values).any()


def eigh(a: Any, uplo: str = "L") -> tuple[Any, Any, Any]:
    what = "cupygraph.linalg.eigh"  # (a and uplo checked by _public_solvers.eigh)
    dtype = float_dtype(a)
    n = a.shape[0]
    name = _spectral_routines.eigh_routine(n)
    routine = routine_name(dtype, name, what)  # also refuses dtypes other than float32 / float64
    _refuse_under_capture(what, name, dtype, a.shape)
    fill = LOWER if uplo == "L" else UPPER
    with cupy.cuda.Device(a.device.id):
        work = fortran_copy(a, dtype)
        w = cupy.empty(n, dtype=dtype)
        info = new_info()
        if n == 0:
            return w, cupy.empty((0, 0), dtype=dtype), info
        h = handle(a.device.id)
        if name == "xsyev_batched":
            _xsyev_batched(h, work, w, info, fill)
        else:
            args = (EIG_MODE_VECTOR, fill, n, work.data.ptr, n, w.data.ptr)
            lwork = h.call(routine + "_buffer_size", *args)  # eagerly only: syevd is refused under capture
            scratch = cupy.empty(max(lwork, 1), dtype=dtype)
            h.call(routine, *args, scratch.data.ptr, lwork, info.data.ptr)
        v = cupy.ascontiguousarray(work)
        _nan_is_a_failure(info, w)
        poison_on_failure(info, w, v)
    return w, v, info


def _xsyev_batched(h: Any, work: Any, w: Any, info: Any, fill: int) -> None:
    """XsyevBatched (64-bit API) on one matrix: eigenvalues into w, eigenvectors over work."""
    n, dtype = work.shape[0], work.dtype
    code = _DATA_TYPE[dtype.char]
    args = (h.params, EIG_MODE_VECTOR, fill, n, code, work.data.ptr, n, code, w.data.ptr, code)
    device_bytes, host_bytes = _sizes(h, ("xsyev_batched", n, dtype.char, fill), "xsyev_batched_buffer_size",
                                      *args, 1)
    if host_bytes and stream_is_capturing(cupy.cuda.get_current_stream()):
        raise CaptureError(f"{FallbackReason.LIBRARY_CALL.text}: cuSOLVER XsyevBatched asks for {host_bytes} bytes "
                           "of host workspace here, which a graph cannot hold; the key runs eagerly")
    scratch = cupy.empty(max(int(device_bytes), 1), dtype=cupy.uint8)
    host = numpy.empty(max(int(host_bytes), 1), dtype=numpy.uint8)
    h.call("xsyev_batched", *args, scratch.data.ptr, int(device_bytes), host.ctypes.data, int(host_bytes),
           info.data.ptr, 1)


def svd(a: Any, full_matrices: bool = True) -> tuple[Any, Any, Any, Any]:
    """NumPy's ``svd(a, full_matrices)``: U, S (descending), Vh."""
    what = "cupygraph.linalg.svd"  # (a checked by _public_solvers.svd)
    m, n = a.shape
    dtype = float_dtype(a)
    name = _spectral_routines.svd_routine(m, n)
    routine = routine_name(dtype, name, what)
    _refuse_under_capture(what, name, dtype, a.shape)
    if m < n:  # computed for A^T = V S U^T (gesvd needs M >= N; one rule for both routines)
        vt, s, ut, info = svd(a.T, full_matrices)
        return cupy.ascontiguousarray(ut.T), s, cupy.ascontiguousarray(vt.T), info
    with cupy.cuda.Device(a.device.id):
        if n == 0:
            u = cupy.eye(m, dtype=dtype) if full_matrices else cupy.empty((m, 0), dtype=dtype)
            return u, cupy.empty(0, dtype=dtype), cupy.empty((0, 0), dtype=dtype), new_info()
        if name == "gesvdj_batched":
            return _svd_jacobi(a, dtype, routine, full_matrices)
        return _svd_qr(a, dtype, routine, full_matrices)


def _svd_jacobi(a: Any, dtype: Any, routine: str, full_matrices: bool) -> tuple[Any, Any, Any, Any]:
    """gesvdjBatched on one matrix: it always forms the square U (M, M) and V (N, N), not V^T."""
    m, n = a.shape
    k = min(m, n)
    work = fortran_copy(a, dtype)
    s = cupy.empty(k, dtype=dtype)
    u = cupy.empty((m, m), dtype=dtype, order="F")
    v = cupy.empty((n, n), dtype=dtype, order="F")
    info = new_info()
    h = handle(a.device.id)
    args = (EIG_MODE_VECTOR, m, n, work.data.ptr, m, s.data.ptr, u.data.ptr, m, v.data.ptr, n)
    lwork = _sizes(h, (routine, m, n), routine + "_buffer_size", *args, h.gesvdj_params, 1)
    scratch = cupy.empty(max(lwork, 1), dtype=dtype)
    h.call(routine, *args, scratch.data.ptr, lwork, info.data.ptr, h.gesvdj_params, 1)
    _nan_is_a_failure(info, s)
    kept = slice(None) if full_matrices else slice(0, k)
    u_out = cupy.ascontiguousarray(u[:, kept])
    vt_out = v[:, kept].T.copy()  # V's columns are Vh's rows: a C-ordered copy of the transposed view
    poison_on_failure(info, u_out, s, vt_out)
    return u_out, s, vt_out, info


def _svd_qr(a: Any, dtype: Any, routine: str, full_matrices: bool) -> tuple[Any, Any, Any, Any]:
    """gesvd (M >= N), eagerly only."""
    m, n = a.shape
    k = min(m, n)
    job = ord("A") if full_matrices else ord("S")
    work = fortran_copy(a, dtype)
    s = cupy.empty(k, dtype=dtype)
    u = cupy.empty((m, m if full_matrices else k), dtype=dtype, order="F")
    vt = cupy.empty((n, n), dtype=dtype, order="F")
    info = new_info()
    h = handle(a.device.id)
    lwork = max(h.call(routine + "_buffer_size", m, n), 1)
    scratch = cupy.empty(lwork, dtype=dtype)
    rwork = cupy.empty(max(k - 1, 1), dtype=dtype)
    h.call(routine, job, job, m, n, work.data.ptr, max(m, 1), s.data.ptr, u.data.ptr, max(m, 1), vt.data.ptr,
           max(n, 1), scratch.data.ptr, lwork, rwork.data.ptr, info.data.ptr)
    u, vt = cupy.ascontiguousarray(u), cupy.ascontiguousarray(vt[:k] if not full_matrices else vt)
    _nan_is_a_failure(info, s)
    poison_on_failure(info, u, s, vt)
    return u, s, vt, info
