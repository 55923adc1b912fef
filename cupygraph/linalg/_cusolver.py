"""``solve``, ``inv``, ``cholesky``, ``qr`` and ``slogdet`` of CuPy arrays on cuSOLVER, eagerly or under a
CUDA graph capture; and what ``_spectral`` shares with them (the thread's handle, the work-array helpers).

For one matrix, ``solve``, ``cholesky`` and ``qr`` run the routines ``cupy.linalg`` runs (getrf + getrs,
potrf, geqrf + orgqr) with the same arguments on the same memory layout, so they compute what CuPy
computes (``routes/cupy_linalg.py`` relies on it; ``docs/ROUTING.md`` says where results may differ).

CuPy refuses ``cupy.linalg`` under stream capture (it checks ``devInfo`` on the host, and its
cuSOLVER binding refuses a capturing stream). Here every call goes through
``nvmath.bindings.cusolverDn`` (imported at the first call) on this thread's handle, bound to the
current stream:

* the handle is made outside any capture (the warm-up makes it; a capture that would have to
  make one fails with ``CaptureError`` saying to warm up), and a recording holds it;
* the input is first copied into a work array cuSOLVER may overwrite (Fortran-ordered; C-ordered,
  so column-major it is the transpose, for ``cholesky`` and ``slogdet``, as CuPy does), the
  workspace and the ``info`` flag are ordinary arrays of the current allocator (the family's pool
  under ``jit``), so nothing outside the graph's memory is touched;
* nothing is read back to the host: when cuSOLVER reports a failure (a singular matrix for
  ``solve``/``inv``, one not positive definite for ``cholesky``), a small kernel fills the
  results with NaN on the device. ``return_info=True`` also returns the ``info`` array (int32,
  0 = success) for ``check(info)`` after the replay.

float32 and float64 (``s``/``d`` routines); other dtypes are refused with a message. ``eigh`` and
``svd`` live in ``_spectral`` (their routine depends on the matrix size, ``_spectral_routines``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy
import numpy

from ..backends.capturing import stream_is_capturing
from ..errors import CaptureError, CupyGraphError
from ..reasons import FallbackReason
from ._nvmath import LazyBinding, ThreadHandles
from ._spectral_routines import PREFIX

LOWER, UPPER = 0, 1  # cublasFillMode_t
OP_N = 0


class SolverError(CupyGraphError, RuntimeError):
    """A cuSOLVER call returned an error status (bad arguments, not a numerical failure)."""


_library = LazyBinding("cusolverDn", "cupygraph.linalg's cuSOLVER functions need")


class _Handle:
    """One thread's cusolverDn handle on one device (kept for the thread's life)."""

    def __init__(self, lib: Any):
        self.lib = lib
        self.ptr = int(lib.create())
        self.stream_ptr = -1
        # Params objects of XsyevBatched and gesvdjBatched, made with the handle: never during a capture.
        self.params = int(lib.create_params())
        self.gesvdj_params = int(lib.create_gesvdj_info())
        self.workspace_sizes: dict[tuple[Any, ...], Any] = {}

    def closer(self) -> Callable[[], None]:
        lib, ptr, params, gesvdj = self.lib, self.ptr, self.params, self.gesvdj_params

        def close() -> None:
            lib.destroy_params(params)
            lib.destroy_gesvdj_info(gesvdj)
            lib.destroy(ptr)

        return close

    def call(self, routine: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, routine)(self.ptr, *args)
        except Exception as err:
            if stream_is_capturing(cupy.cuda.get_current_stream()):  # e.g. a routine that synchronises inside
                raise CaptureError(f"{FallbackReason.LIBRARY_CALL.text}: cuSOLVER {routine} failed under capture "
                                   f"({type(err).__name__}: {err})") from err
            raise SolverError(f"cusolverDn {routine} failed: {err}") from err


_handles = ThreadHandles(lambda device_id: _Handle(_library()), "cuSOLVER", "cupygraph.linalg")


def handle(device_id: int) -> _Handle:
    """This thread's handle on ``device_id``, bound to the current stream."""
    found: _Handle = _handles.get(device_id)
    return found


def routine_name(dtype: Any, name: str, what: str) -> str:
    """cuSOLVER's routine ``name`` for ``dtype`` (``potrf`` -> ``spotrf``); other dtypes are refused."""
    prefix = PREFIX.get(dtype.char)
    if prefix is None:
        raise TypeError(f"{what}: cuSOLVER path supports float32 and float64 arrays, got {dtype}; cast first")
    return prefix + name


_poison_kernel: Any = None


def poison_on_failure(info: Any, *outputs: Any) -> None:
    """NaN into every output where ``info`` (int32, 0-d) is non-zero: a failure is never a number."""
    global _poison_kernel
    if _poison_kernel is None:
        _poison_kernel = cupy.ElementwiseKernel(
            "int32 info", "T x", "if (info != 0) x = (T)__longlong_as_double(0x7ff8000000000000ULL);",
            "cupygraph_linalg_nan_on_failure")
    for out in outputs:
        _poison_kernel(info, out)


def _square(a: Any, what: str) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{what}: argument 'a' must be a square matrix (..., M, M), got shape {a.shape}")


def float_dtype(a: Any) -> Any:
    """The dtype ``a`` is factorised in: float32 and float64 as they are, integers as float64."""
    return a.dtype if a.dtype.char in "fd" else cupy.dtype("d") if a.dtype.kind in "biu" else a.dtype


def fortran_copy(x: Any, dtype: Any) -> Any:
    """A Fortran-ordered copy cuSOLVER may overwrite. Not ``cupy.asfortranarray``: for a C-ordered
    float matrix that calls cuBLAS (geam), which CuPy refuses under capture."""
    out = cupy.empty(x.shape, dtype=dtype, order="F")
    out[...] = x
    return out


def new_info() -> Any:
    """A 0-d int32 ``info`` for one cuSOLVER call to write (0: success)."""
    return cupy.zeros((), dtype=cupy.int32)


def c_copy(x: Any, dtype: Any) -> Any:
    """A C-ordered copy cuSOLVER may overwrite; read column-major, it is the transpose of ``x``."""
    out = cupy.empty(x.shape, dtype=dtype)
    out[...] = x
    return out


def cholesky(a: Any) -> tuple[Any, Any]:
    """The lower factor L of each matrix, as CuPy computes it for one matrix: potrf of the upper
    triangle of a C-ordered copy (column-major, a^T, whose upper factor is L^T), so one matrix
    runs the same routine with the same arguments as ``cupy.linalg.cholesky``."""
    what = "cupygraph.linalg.cholesky"
    _square(a, what)
    dtype = float_dtype(a)
    routine = routine_name(dtype, "potrf", what)
    with cupy.cuda.Device(a.device.id):
        out = cupy.empty(a.shape, dtype=dtype)
        info = cupy.zeros(a.shape[:-2], dtype=cupy.int32)
        for index in numpy.ndindex(a.shape[:-2]) if a.ndim > 2 else [()]:
            work = c_copy(a[index], dtype)
            n = work.shape[0]
            h = handle(a.device.id)
            lwork = h.call(routine + "_buffer_size", UPPER, n, work.data.ptr, max(n, 1))
            scratch = cupy.empty(max(lwork, 1), dtype=dtype)
            flag = info[index]
            h.call(routine, UPPER, n, work.data.ptr, max(n, 1), scratch.data.ptr, lwork, flag.data.ptr)
            out[index] = cupy.tril(work)
            poison_on_failure(flag, out[index])
    return out, info


def _lu_solve(a2: Any, b2: Any, dtype: Any, what: str, out: Any, flag: Any) -> None:
    """``out = solve(a2, b2)`` for one (M, M) matrix and (M, K) right-hand sides."""
    getrf, getrs = routine_name(dtype, "getrf", what), routine_name(dtype, "getrs", what)
    work = fortran_copy(a2, dtype)
    rhs = fortran_copy(b2, dtype)
    n, k = work.shape[0], rhs.shape[1]
    h = handle(a2.device.id)
    lwork = h.call(getrf + "_buffer_size", n, n, work.data.ptr, max(n, 1))
    scratch = cupy.empty(max(lwork, 1), dtype=dtype)
    pivots = cupy.empty(max(n, 1), dtype=cupy.int32)
    h.call(getrf, n, n, work.data.ptr, max(n, 1), scratch.data.ptr, pivots.data.ptr, flag.data.ptr)
    # getrs writes its own info (0 unless an argument is bad): not into ``flag``, which would lose a
    # singular matrix reported by getrf.
    solved = new_info()
    h.call(getrs, OP_N, n, k, work.data.ptr, max(n, 1), pivots.data.ptr, rhs.data.ptr, max(n, 1), solved.data.ptr)
    out[...] = rhs
    poison_on_failure(flag, out)


def solve(a: Any, b: Any) -> tuple[Any, Any]:
    what = "cupygraph.linalg.solve"
    _square(a, what)
    if not isinstance(b, cupy.ndarray):
        raise TypeError(f"{what}: argument 'b' must be a CuPy array here (a is one), got {type(b).__name__}")
    dtype = cupy.result_type(float_dtype(a), float_dtype(b))
    vector = b.ndim == a.ndim - 1  # (shapes checked by _public_solvers.solve, for both backends)
    with cupy.cuda.Device(a.device.id):
        out = cupy.empty(b.shape, dtype=dtype)
        info = cupy.zeros(a.shape[:-2], dtype=cupy.int32)
        for index in numpy.ndindex(a.shape[:-2]) if a.ndim > 2 else [()]:
            rhs, target = (b[index][:, None], out[index][:, None]) if vector else (b[index], out[index])
            _lu_solve(a[index], rhs, dtype, what, target, info[index])
    return out, info


def inv(a: Any) -> tuple[Any, Any]:
    what = "cupygraph.linalg.inv"
    _square(a, what)
    dtype = float_dtype(a)
    with cupy.cuda.Device(a.device.id):
        eye = cupy.broadcast_to(cupy.eye(a.shape[-1], dtype=dtype), a.shape)
        return solve(a, eye)


def qr(a: Any) -> tuple[Any, Any, Any]:
    """NumPy's ``qr(a, mode="reduced")``: Q (M, K) and R (K, N), K = min(M, N)."""
    what = "cupygraph.linalg.qr"
    if a.ndim != 2:
        raise ValueError(f"{what}: argument 'a' must be one (M, N) matrix here, got shape {a.shape}")
    dtype = float_dtype(a)
    geqrf, orgqr = routine_name(dtype, "geqrf", what), routine_name(dtype, "orgqr", what)
    m, n = a.shape
    k = min(m, n)
    with cupy.cuda.Device(a.device.id):
        work = fortran_copy(a, dtype)
        tau = cupy.empty(max(k, 1), dtype=dtype)
        info = new_info()
        h = handle(a.device.id)
        # Each routine gets the workspace size it asks for, as CuPy passes them (one buffer serves both).
        factor_lwork = h.call(geqrf + "_buffer_size", m, n, work.data.ptr, max(m, 1))
        form_lwork = h.call(orgqr + "_buffer_size", m, k, k, work.data.ptr, max(m, 1), tau.data.ptr)
        scratch = cupy.empty(max(factor_lwork, form_lwork, 1), dtype=dtype)
        h.call(geqrf, m, n, work.data.ptr, max(m, 1), tau.data.ptr, scratch.data.ptr, factor_lwork, info.data.ptr)
        r = cupy.ascontiguousarray(cupy.triu(work[:k, :]))
        q_work = work[:, :k]  # F-ordered columns: contiguous, orgqr overwrites them in place
        formed = new_info()  # apart from geqrf's, which it would overwrite
        h.call(orgqr, m, k, k, q_work.data.ptr, max(m, 1), tau.data.ptr, scratch.data.ptr, form_lwork,
               formed.data.ptr)
        info += formed
        q = cupy.ascontiguousarray(q_work)
        poison_on_failure(info, q, r)
    return q, r, info


def slogdet(a: Any) -> tuple[Any, Any]:
    """NumPy's ``slogdet(a)`` from getrf as CuPy computes it: the LU factors of a C-ordered copy
    (column-major a^T, of the same determinant), the sign from the pivots and U's diagonal, log|det|
    the sum of log|U_ii|; an exactly singular matrix (getrf's info > 0) gives sign 0 and -inf."""
    what = "cupygraph.linalg.slogdet"
    _square(a, what)
    dtype = float_dtype(a)
    getrf = routine_name(dtype, "getrf", what)
    n = a.shape[-1]
    with cupy.cuda.Device(a.device.id):
        if a.size == 0:  # no matrices, or 0 x 0 ones (determinant 1)
            return cupy.ones(a.shape[:-2], dtype=dtype), cupy.zeros(a.shape[:-2], dtype=dtype)
        lu = cupy.empty(a.shape, dtype=dtype)
        pivots = cupy.empty((*a.shape[:-2], n), dtype=cupy.int32)
        info = cupy.zeros(a.shape[:-2], dtype=cupy.int32)
        for index in numpy.ndindex(a.shape[:-2]) if a.ndim > 2 else [()]:
            work = lu[index]
            work[...] = a[index]
            h = handle(a.device.id)
            lwork = h.call(getrf + "_buffer_size", n, n, work.data.ptr, max(n, 1))
            scratch = cupy.empty(max(lwork, 1), dtype=dtype)
            h.call(getrf, n, n, work.data.ptr, max(n, 1), scratch.data.ptr, pivots[index].data.ptr,
                   info[index].data.ptr)
        diagonal = cupy.diagonal(lu, axis1=-2, axis2=-1)
        logdet = cupy.log(cupy.abs(diagonal)).sum(axis=-1)
        swaps = cupy.count_nonzero(pivots != cupy.arange(1, n + 1, dtype=cupy.int32), axis=-1)  # 1-based pivots
        swaps += cupy.count_nonzero(diagonal < 0, axis=-1)
        sign = ((swaps % 2) * -2 + 1).astype(dtype)
        singular = info > 0
        return cupy.where(singular, dtype.type(0), sign), cupy.where(singular, dtype.type("-inf"), logdet.astype(dtype))


def det(a: Any) -> Any:
    sign, logdet = slogdet(a)
    return sign * cupy.exp(logdet)
