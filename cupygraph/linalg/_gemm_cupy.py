"""Matrix products of CuPy arrays through cuBLAS, eagerly or under a CUDA graph capture.

Every product is one ``cublasGemmEx`` (or ``cublasGemmStridedBatchedEx`` for a batch) on this
thread's handle, bound to the current stream and that stream's workspace (``_cublas_handles``); one
with a bias or activation (``gemm(..., bias=, activation=)``, ``linalg.linear``) is one
``cublasLtMatmul`` with that epilogue fused (``_gemm_lt``). Operands
cuBLAS cannot read in place are copied first, and an output it cannot write in place is computed
in a temporary and copied back; both are ordinary CuPy kernels, so they capture too. Host-pointer
alpha/beta are frozen into a captured graph; arrays select device pointer mode and are read at
every replay.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import cupy
import numpy as np

from ._binding import COMPUTE_TYPE, DATA_TYPE, GEMM_DEFAULT, OP_N, OP_T, POINTER_MODE_DEVICE, POINTER_MODE_HOST
from ._cublas_handles import handle_for
from ._epilogue import check_bias, check_bias_type, checked_gemm
from ._gemm_lt import Epilogue, apply_unfused, fused_product
from ._shapes import (
    check_addend,
    check_int32,
    check_scale_array,
    host_scale,
    matmul_result,
    matmul_shapes,
    resolve,
    result_dtype,
    scale_dtype,
)


def device_of(what: str, arrays: dict[str, Any]) -> int:
    devices = {name: int(x.device.id) for name, x in arrays.items() if x is not None}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on cuda:{d}" for name, d in devices.items())
        raise ValueError(f"{what}: the arrays live on different devices ({listed}); move them to one device")
    return next(iter(devices.values()))


def _check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    if not isinstance(out, cupy.ndarray):
        raise TypeError(f"{what}: out must be a CuPy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"{what}: out is {out.dtype}{list(out.shape)} but the result is {dtype}{list(shape)}")


def bounds(x: Any) -> tuple[int, int]:
    lo = hi = int(x.data.ptr)
    for size, step in zip(x.shape, x.strides):
        if size > 1:
            if step < 0:
                lo += step * (size - 1)
            else:
                hi += step * (size - 1)
    return lo, hi + x.itemsize


def _overlaps(x: Any, y: Any) -> bool:
    if x.size == 0 or y.size == 0:
        return False
    (a0, a1), (b0, b1) = bounds(x), bounds(y)
    return a0 < b1 and b0 < a1


class Scalars:
    """alpha and beta as cuBLAS reads them: host values (frozen at capture) or device pointers."""

    def __init__(self, alpha: Any, beta: Any, dtype: np.dtype, what: str):
        on_device = isinstance(alpha, cupy.ndarray) or isinstance(beta, cupy.ndarray)
        self.mode = POINTER_MODE_DEVICE if on_device else POINTER_MODE_HOST
        values = []
        for name, value in (("alpha", alpha), ("beta", beta)):
            if isinstance(value, cupy.ndarray):
                check_scale_array(value, dtype, name, what)
                values.append(value)
            elif on_device:  # cuBLAS reads both or neither from the device
                values.append(cupy.full((), host_scale(value, dtype, name, what)[()], dtype=scale_dtype(dtype)))
            else:
                values.append(host_scale(value, dtype, name, what))
        self.alpha, self.beta = values
        # The beta term as an operand of a CuPy ufunc: a NumPy scalar, or the device array.
        self.beta_term = self.beta if on_device else self.beta[()]
        self.beta_zero = not on_device and self.beta_term == 0  # BLAS: C is not read at all
        self.beta_one = not on_device and self.beta_term == 1
        # Where cuBLAS reads them: this object keeps both arrays alive for as long as it is used.
        if on_device:
            self.pointers = (int(self.alpha.data.ptr), int(self.beta.data.ptr))
        else:
            self.pointers = (int(self.alpha.ctypes.data), int(self.beta.ctypes.data))


_ONE_ZERO: dict[str, Any] = {}


def _unit_scalars(dtype: np.dtype) -> Scalars:
    found = _ONE_ZERO.get(dtype.char)
    if found is None:
        found = _ONE_ZERO[dtype.char] = Scalars(1, 0, dtype, "cupygraph.matmul")
    return found


def product(a: Any, b: Any, c: Any, batch: tuple[int, ...], m: int, k: int, n: int, scalars: Scalars,
            what: str, epilogue: Optional[Epilogue] = None) -> None:
    """``c = alpha * a @ b + beta * c`` on views at least 2-D whose batch axes broadcast to ``batch``;
    with an ``epilogue``, ``c = activation(that + bias)`` on cuBLASLt (``_gemm_lt``)."""
    count = math.prod(batch)
    if count == 0 or m == 0 or n == 0:
        return
    if k == 0:  # no products to sum: only the beta term is left
        if scalars.beta_zero:
            c.fill(0)
        elif not scalars.beta_one:
            cupy.multiply(c, scalars.beta_term, out=c, casting="unsafe")
        if epilogue is not None:
            apply_unfused(c, epilogue)
        return
    dtype = c.dtype
    # cuBLAS must not write what it still reads: an output overlapping an operand is a temporary.
    overlapping = _overlaps(c, a) or _overlaps(c, b)
    call, a, b, target = resolve(a, b, _temporary(c, batch, m, n, scalars) if overlapping else c, batch, m, k, n,
                                 cupy, lambda: _temporary(c, batch, m, n, scalars), features_first=epilogue is not None)
    check_int32(what, m=call.m, n=call.n, k=call.k, lda=call.lda, ldb=call.ldb, ldc=call.ldc, batch=count)
    first, second = (a, b) if call.first == "a" else (b, a)
    stream = cupy.cuda.get_current_stream()
    if epilogue is not None and fused_product(call, first, second, target, scalars, epilogue, stream):
        if target is not c:
            c[...] = target
        return
    handle = handle_for(int(c.device.id), stream)
    handle.set_pointer_mode(scalars.mode)
    alpha, beta = scalars.pointers
    dt, ct = DATA_TYPE[dtype.char], COMPUTE_TYPE[dtype.char]
    ta, tb = OP_T if call.trans_a else OP_N, OP_T if call.trans_b else OP_N
    if count == 1:
        handle.lib.gemm(handle.ptr, ta, tb, call.m, call.n, call.k, alpha, first.data.ptr, dt, call.lda,
                        second.data.ptr, dt, call.ldb, beta, target.data.ptr, dt, call.ldc, ct, GEMM_DEFAULT)
    else:
        handle.lib.gemm_strided_batched(
            handle.ptr, ta, tb, call.m, call.n, call.k, alpha, first.data.ptr, dt, call.lda, call.stride_a,
            second.data.ptr, dt, call.ldb, call.stride_b, beta, target.data.ptr, dt, call.ldc, call.stride_c,
            count, ct, GEMM_DEFAULT)
    if epilogue is not None:  # cuBLASLt has no algorithm for it: the same layout, then the epilogue kernel
        apply_unfused(target, epilogue)
    if target is not c:
        c[...] = target


def _temporary(c: Any, batch: tuple[int, ...], m: int, n: int, scalars: Scalars) -> Any:
    target = cupy.empty((*batch, m, n), dtype=c.dtype)
    if not scalars.beta_zero:
        target[...] = c
    return target


def _matrices(a: Any, b: Any, out: Any) -> tuple[Any, Any, Any]:
    """NumPy's 1-D rule: a vector operand is a row (a) or a column (b) whose axis the result lacks."""
    if a.ndim == 1 and b.ndim == 1:
        return a[None, :], b[:, None], out.reshape(1, 1)
    if a.ndim == 1:
        return a[None, :], b, out[..., None, :]
    if b.ndim == 1:
        return a, b[:, None], out[..., None]
    return a, b, out


def _operands(what: str, a: Any, b: Any) -> np.dtype:
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, cupy.ndarray):
            raise TypeError(f"{what}: argument {name!r} must be a CuPy array here (the other is one), got "
                            f"{type(x).__name__}")
    return result_dtype(a.dtype, b.dtype, what)


def matmul(a: Any, b: Any, out: Optional[Any] = None) -> Any:
    what = "cupygraph.matmul"
    dtype = _operands(what, a, b)
    shape = matmul_result(a.shape, b.shape, what)
    device = device_of(what, {"a": a, "b": b, "out": out})
    with cupy.cuda.Device(device):
        a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
        if out is None:
            out = cupy.empty(shape, dtype=dtype)
        else:
            _check_out(out, shape, dtype, what)
        a2, b2, c2 = _matrices(a, b, out)
        batch, m, k, n = matmul_shapes(a2.shape, b2.shape, what)
        product(a2, b2, c2, batch, m, k, n, _unit_scalars(dtype), what)
    return out


def gemm(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
         trans_b: bool = False, out: Any = None, bias: Any = None, activation: Any = None,
         what: str = "cupygraph.linalg.gemm") -> Any:
    dtype = _operands(what, a, b)
    act = checked_gemm(a, b, dtype, bias, activation, what)
    if bias is not None:
        check_bias_type(bias, cupy.ndarray, what)
    device = device_of(what, {"a": a, "b": b, "c": c, "out": out, "bias": bias})
    with cupy.cuda.Device(device):
        a = a.astype(dtype, copy=False)
        b = b.astype(dtype, copy=False)
        if trans_a:
            a = a.swapaxes(-1, -2)
        if trans_b:
            b = b.swapaxes(-1, -2)
        batch, m, k, n = matmul_shapes(a.shape, b.shape, what)
        shape = (*batch, m, n)
        epilogue = None
        if bias is not None or act is not None:
            if bias is not None:
                check_bias(bias, n, dtype, what)
                if bias.strides[0] != bias.itemsize and n > 1:  # cuBLASLt reads a packed vector
                    bias = cupy.ascontiguousarray(bias)
            epilogue = Epilogue(bias, act)
        scalars = Scalars(alpha, beta, dtype, what)
        if out is None:
            out = cupy.empty(shape, dtype=dtype)
        else:
            _check_out(out, shape, dtype, what)
        if c is not None and out is not c and not scalars.beta_zero:
            if not isinstance(c, cupy.ndarray):
                raise TypeError(f"{what}: c must be a CuPy array, got {type(c).__name__}")
            check_addend(c.shape, shape, what)
            if _overlaps(out, c):
                raise ValueError(f"{what}: out overlaps c without being c; pass out=c to update c in place")
            out[...] = c  # broadcasts, like NumPy's alpha * a @ b + beta * c
        elif c is None and not scalars.beta_zero:
            out.fill(0)  # beta times a c that is not given is zero, whatever beta is at replay
        product(a, b, out, batch, m, k, n, scalars, what, epilogue)
    return out

