"""The NumPy reference of ``cupygraph.linalg``'s products (matmul, gemm with its bias/activation
epilogue, gemm_batched): the same contracts, checks and errors as their cuBLAS path (``_gemm_cupy``).

On the host backend a capture run sees its buffers as ``CaptureArray`` views that refuse ``@``
(CuPy cannot capture it); these functions are the products that *do* capture on the GPU, so they
compute on plain views and hand results back guarded (a later ``float()`` of them is still
refused, as it would be on the GPU).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..backends.guards.host_capturable import handed_back, plain_array
from ._epilogue import apply_host, check_bias, checked_gemm
from ._shapes import (
    check_addend,
    check_scale_array,
    host_scale,
    matmul_result,
    matmul_shapes,
    result_dtype,
    scale_dtype,
)


def _check_arrays(what: str, **arrays: Any) -> None:
    for name, x in arrays.items():
        if x is not None and not isinstance(x, np.ndarray):
            raise TypeError(f"{what}: argument {name!r} must be a NumPy array here (the others are), got "
                            f"{type(x).__name__}")


def _check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"{what}: out is {out.dtype}{list(out.shape)} but the result is {dtype}{list(shape)}")


def matmul(a: Any, b: Any, out: Optional[Any] = None) -> Any:
    what = "cupygraph.matmul"
    _check_arrays(what, a=a, b=b, out=out)
    dtype = result_dtype(a.dtype, b.dtype, what)
    shape = matmul_result(a.shape, b.shape, what)
    if out is not None:
        _check_out(out, shape, dtype, what)
        np.matmul(plain_array(a), plain_array(b), out=plain_array(out))
        return out
    return handed_back(np.matmul(plain_array(a), plain_array(b)))


def _scale(value: Any, dtype: np.dtype, name: str, what: str) -> tuple[np.ndarray, bool]:
    """(value as an array of the scale dtype, whether it was given as an array: read every call)."""
    if isinstance(value, np.ndarray):
        check_scale_array(value, dtype, name, what)
        return plain_array(value).reshape(()), True
    return host_scale(value, dtype, name, what), False


def _reads_c(beta: Any, dtype: np.dtype, what: str) -> bool:
    """Whether ``c`` is read: unless beta is a number equal to 0 (BLAS's rule; an array beta is read at run time,
    so the GPU path treats it as read, and so does this reference)."""
    return isinstance(beta, np.ndarray) or bool(_scale(beta, dtype, "beta", what)[0] != 0)


def _gemm_one(a: Any, b: Any, c: Any, alpha: Any, beta: Any, dtype: np.dtype, what: str, bias: Any = None,
              activation: Optional[str] = None) -> np.ndarray:
    compute = scale_dtype(dtype) if dtype == np.float16 else dtype  # cuBLAS sums float16 in float32
    alpha_v, _ = _scale(alpha, dtype, "alpha", what)
    beta_v, _ = _scale(beta, dtype, "beta", what)
    result = alpha_v * np.matmul(plain_array(a).astype(compute, copy=False), plain_array(b).astype(compute, copy=False))
    if c is not None and bool(beta_v != 0):  # BLAS: with beta 0, C is not read (NaN there stays out)
        result = result + beta_v * plain_array(c).astype(compute, copy=False)
    if bias is not None or activation is not None:  # the epilogue, in the scale type (_epilogue)
        result = apply_host(np.asarray(result), None if bias is None else plain_array(bias), activation)
    return np.asarray(result).astype(dtype, copy=False)


def gemm(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
         trans_b: bool = False, out: Any = None, bias: Any = None, activation: Any = None,
         what: str = "cupygraph.linalg.gemm") -> Any:
    _check_arrays(what, a=a, b=b, c=c, out=out, bias=bias)
    dtype = result_dtype(a.dtype, b.dtype, what)
    act = checked_gemm(a, b, dtype, bias, activation, what)
    pa = plain_array(a).swapaxes(-1, -2) if trans_a else plain_array(a)
    pb = plain_array(b).swapaxes(-1, -2) if trans_b else plain_array(b)
    batch, m, _, n = matmul_shapes(pa.shape, pb.shape, what)
    shape = (*batch, m, n)
    if bias is not None:
        check_bias(bias, n, dtype, what)
    if out is not None:
        _check_out(out, shape, dtype, what)
    addend = None
    if c is not None and _reads_c(beta, dtype, what):  # the GPU path's checks, made where it makes them
        check_addend(c.shape, shape, what)
        if out is not None and out is not c and np.may_share_memory(out, c):
            raise ValueError(f"{what}: out overlaps c without being c; pass out=c to update c in place")
        addend = np.broadcast_to(plain_array(c), shape)
    result = _gemm_one(pa, pb, addend, alpha, beta, dtype, what, bias, act)
    if out is None:
        return handed_back(np.ascontiguousarray(result))
    np.copyto(plain_array(out), result)
    return out


def _matrix_list(name: str, items: Any, what: str) -> list[Any]:
    if not isinstance(items, (list, tuple)) or not items:
        raise TypeError(f"{what}: {name} must be a non-empty list of 2-D arrays, got {type(items).__name__}")
    first = items[0]
    for i, x in enumerate(items):
        if not isinstance(x, np.ndarray) or x.ndim != 2:
            raise TypeError(f"{what}: {name}[{i}] must be a 2-D array, got {getattr(x, 'shape', type(x).__name__)}")
        if x.shape != first.shape or x.dtype != first.dtype:
            raise ValueError(f"{what}: {name}[{i}] is {x.dtype}{list(x.shape)} but {name}[0] is "
                             f"{first.dtype}{list(first.shape)}; every matrix of a list must match")
    return list(items)


def gemm_batched(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
                 trans_b: bool = False, out: Any = None) -> Any:
    what = "cupygraph.linalg.gemm_batched"
    a_list, b_list = _matrix_list("a", a, what), _matrix_list("b", b, what)
    if len(b_list) != len(a_list):
        raise ValueError(f"{what}: a has {len(a_list)} matrices but b has {len(b_list)}")
    c_list = None if c is None else _matrix_list("c", c, what)
    if c_list is not None and len(c_list) != len(a_list):
        raise ValueError(f"{what}: c has {len(c_list)} matrices but a has {len(a_list)}")
    dtype = result_dtype(a_list[0].dtype, b_list[0].dtype, what)
    ta = [plain_array(x).T if trans_a else plain_array(x) for x in a_list]
    tb = [plain_array(x).T if trans_b else plain_array(x) for x in b_list]
    _, m, _, n = matmul_shapes(ta[0].shape, tb[0].shape, what)
    if c_list is not None and _reads_c(beta, dtype, what):
        check_addend(c_list[0].shape, (m, n), what, "c[0]")
    results = [_gemm_one(x, y, None if c_list is None else c_list[i], alpha, beta, dtype, what)
               for i, (x, y) in enumerate(zip(ta, tb))]
    if out is None:
        return handed_back(np.stack(results).reshape(len(results), m, n))
    out_list = _matrix_list("out", out, what)
    if len(out_list) != len(results) or out_list[0].shape != (m, n) or out_list[0].dtype != dtype:
        raise ValueError(f"{what}: out must be {len(results)} matrices of {dtype}{[m, n]}")
    for target, value in zip(out_list, results):
        np.copyto(plain_array(target), value)
    return out
