"""``gemm_batched``: one ``cublasGemmBatchedEx`` over lists of equally shaped matrices at any addresses.

cuBLAS reads the matrices' addresses from device arrays of pointers (``_pointer_table``).
Matrices with equal strides are read in place; otherwise every matrix of that list is copied.
"""

from __future__ import annotations

from typing import Any, Optional

import cupy

from ._binding import COMPUTE_TYPE, DATA_TYPE, GEMM_DEFAULT, OP_N, OP_T
from ._cublas_handles import handle_for
from ._gemm_cupy import Scalars, bounds, device_of
from ._pointer_table import pointer_table
from ._shapes import Geometry, check_addend, check_int32, gemm_call, matmul_shapes, result_dtype

_WHAT = "cupygraph.linalg.gemm_batched"


def _matrices(name: str, items: Any) -> list[Any]:
    if not isinstance(items, (list, tuple)) or not items:
        raise TypeError(f"{_WHAT}: {name} must be a non-empty list of 2-D CuPy arrays, got {type(items).__name__}")
    first = items[0]
    for i, x in enumerate(items):
        if not isinstance(x, cupy.ndarray) or x.ndim != 2:
            got = getattr(x, "shape", type(x).__name__)
            raise TypeError(f"{_WHAT}: {name}[{i}] must be a 2-D CuPy array, got {got}")
        if x.shape != first.shape or x.dtype != first.dtype:
            raise ValueError(f"{_WHAT}: {name}[{i}] is {x.dtype}{list(x.shape)} but {name}[0] is "
                             f"{first.dtype}{list(first.shape)}; every matrix of a list must match")
    return list(items)


def _geometry(items: list[Any]) -> Optional[Geometry]:
    strides = items[0].strides
    itemsize = items[0].itemsize
    if any(x.strides != strides for x in items) or any(s % itemsize for s in strides):
        return None
    return Geometry(0, strides[0] // itemsize, strides[1] // itemsize)


def _span(items: list[Any]) -> tuple[int, int]:
    found = [bounds(x) for x in items if x.size]
    return (min(lo for lo, _ in found), max(hi for _, hi in found)) if found else (0, 0)


def gemm_batched(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
                 trans_b: bool = False, out: Any = None) -> Any:
    a_list, b_list = _matrices("a", a), _matrices("b", b)
    count = len(a_list)
    if len(b_list) != count:
        raise ValueError(f"{_WHAT}: a has {count} matrices but b has {len(b_list)}")
    dtype = result_dtype(a_list[0].dtype, b_list[0].dtype, _WHAT)
    device = device_of(_WHAT, {"a[0]": a_list[0], "b[0]": b_list[0]})
    with cupy.cuda.Device(device):
        a_list = [x.astype(dtype, copy=False).T if trans_a else x.astype(dtype, copy=False) for x in a_list]
        b_list = [x.astype(dtype, copy=False).T if trans_b else x.astype(dtype, copy=False) for x in b_list]
        _, m, k, n = matmul_shapes(a_list[0].shape, b_list[0].shape, _WHAT)
        scalars = Scalars(alpha, beta, dtype, _WHAT)
        if out is None:
            result = cupy.empty((count, m, n), dtype=dtype)
            out_list = list(result)
        else:
            out_list = _matrices("out", out)
            if len(out_list) != count or out_list[0].shape != (m, n) or out_list[0].dtype != dtype:
                raise ValueError(f"{_WHAT}: out must be {count} matrices of {dtype}{[m, n]}")
            result = out
        if c is not None and not scalars.beta_zero:
            c_list = _matrices("c", c)
            if len(c_list) != count:
                raise ValueError(f"{_WHAT}: c has {len(c_list)} matrices but a has {count}")
            check_addend(c_list[0].shape, (m, n), _WHAT, "c[0]")
            for target, addend in zip(out_list, c_list):
                if target is not addend:
                    target[...] = addend
        elif c is None and not scalars.beta_zero:
            for target in out_list:
                target.fill(0)
        _run(a_list, b_list, out_list, m, k, n, scalars)
    return result


def _run(a_list: list[Any], b_list: list[Any], out_list: list[Any], m: int, k: int, n: int, scalars: Scalars) -> None:
    count = len(a_list)
    if m == 0 or n == 0:
        return
    if k == 0:
        for target in out_list:
            if scalars.beta_zero:
                target.fill(0)
            elif not scalars.beta_one:
                cupy.multiply(target, scalars.beta_term, out=target, casting="unsafe")
        return
    targets = out_list
    out_lo, out_hi = _span(out_list)
    for items in (a_list, b_list):
        lo, hi = _span(items)
        if lo < out_hi and out_lo < hi:  # cuBLAS must not write what it still reads
            targets = []
    for _ in range(2):
        call, copies = gemm_call(m, k, n, 1, _geometry(a_list), _geometry(b_list),
                                 _geometry(targets) if targets else None)
        if call is not None:
            break
        if "a" in copies:
            a_list = [cupy.ascontiguousarray(x) for x in a_list]
        if "b" in copies:
            b_list = [cupy.ascontiguousarray(x) for x in b_list]
        if "c" in copies:
            targets = [x.copy() if not scalars.beta_zero else cupy.empty((m, n), dtype=x.dtype) for x in out_list]
    else:
        raise RuntimeError(f"{_WHAT}: no cuBLAS layout for contiguous copies (a bug in cupygraph.linalg)")
    check_int32(_WHAT, m=call.m, n=call.n, k=call.k, lda=call.lda, ldb=call.ldb, ldc=call.ldc, batch=count)
    first, second = (a_list, b_list) if call.first == "a" else (b_list, a_list)
    table = pointer_table([x.data.ptr for x in first] + [x.data.ptr for x in second] + [x.data.ptr for x in targets])
    stream = cupy.cuda.get_current_stream()
    handle = handle_for(int(table.device.id), stream)
    handle.set_pointer_mode(scalars.mode)
    alpha, beta = scalars.pointers
    dt, ct = DATA_TYPE[targets[0].dtype.char], COMPUTE_TYPE[targets[0].dtype.char]
    step = table.itemsize * count
    handle.lib.gemm_batched(handle.ptr, OP_T if call.trans_a else OP_N, OP_T if call.trans_b else OP_N,
                            call.m, call.n, call.k, alpha, table.data.ptr, dt, call.lda, table.data.ptr + step, dt,
                            call.ldb, beta, table.data.ptr + 2 * step, dt, call.ldc, count, ct, GEMM_DEFAULT)
    for target, final in zip(targets, out_list):
        if target is not final:
            final[...] = target
