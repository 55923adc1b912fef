"""NumPy ``matmul`` semantics mapped onto cuBLAS's column-major GEMM: dtypes, shapes, layouts.

Pure Python and NumPy dtypes, so every rule here is tested without a GPU. cuBLAS multiplies
column-major matrices; a row-major (C-order) matrix is the column-major storage of its transpose.
So for ``C = A @ B`` with C stored row-major, cuBLAS computes ``C^T = B^T @ A^T`` with the
operands swapped, and an operand stored "the other way" is passed with op T. Any 2-D strided view
with one unit stride and a leading dimension at least its other extent is used in place; anything
else (negative or zero strides inside a matrix, overlapping rows) is first copied.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

SUPPORTED = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128))
"""The operand dtypes cuBLAS multiplies here (the result has the same dtype)."""

_SCALE: dict[str, np.dtype] = {"e": np.dtype(np.float32), "f": np.dtype(np.float32), "d": np.dtype(np.float64),
          "F": np.dtype(np.complex64), "D": np.dtype(np.complex128)}
_INT32_MAX = 2**31 - 1


def result_dtype(a: Any, b: Any, what: str) -> np.dtype:
    """The dtype of ``a @ b`` (NumPy promotion), refused unless cuBLAS multiplies it."""
    for name, dtype in (("a", a), ("b", b)):
        if np.dtype(dtype) not in SUPPORTED:
            raise TypeError(
                f"{what}: argument {name!r} has dtype {np.dtype(dtype)}; cuBLAS multiplies "
                f"{', '.join(str(t) for t in SUPPORTED)} (cast it with .astype first)")
    return np.dtype(np.result_type(a, b))


def scale_dtype(dtype: Any) -> np.dtype:
    """The dtype of alpha and beta for operands of ``dtype`` (float16 GEMMs scale in float32)."""
    return _SCALE[np.dtype(dtype).char]


def matmul_result(a_shape: Sequence[int], b_shape: Sequence[int], what: str) -> tuple[int, ...]:
    """The shape of ``a @ b`` under NumPy's rules (a 1-D operand is a row or a column vector whose
    axis is removed from the result)."""
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) == 0:
            raise ValueError(f"{what}: argument {name!r} is 0-d; matmul needs at least 1-D operands (use * for "
                             "scalars)")
    a2 = (1, a_shape[0]) if len(a_shape) == 1 else tuple(a_shape)
    b2 = (b_shape[0], 1) if len(b_shape) == 1 else tuple(b_shape)
    batch, m, _, n = matmul_shapes(a2, b2, what)
    return batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())


def matmul_shapes(a_shape: Sequence[int], b_shape: Sequence[int], what: str) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) for ``a @ b`` with both operands at least 2-D; NumPy's errors."""
    m, k = a_shape[-2], a_shape[-1]
    k2, n = b_shape[-2], b_shape[-1]
    if k != k2:
        raise ValueError(
            f"{what}: a has shape {tuple(a_shape)} and b {tuple(b_shape)}: the last axis of a ({k}) must equal "
            f"the second-to-last axis of b ({k2})")
    try:
        batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    except ValueError as err:
        raise ValueError(
            f"{what}: the batch axes of a {tuple(a_shape[:-2])} and b {tuple(b_shape[:-2])} do not broadcast "
            "(NumPy's rules: equal, or one of them 1)") from err
    return tuple(batch), m, k, n


def check_addend(c_shape: Sequence[int], shape: tuple[int, ...], what: str, name: str = "c") -> None:
    """``c`` (the ``beta * c`` term) broadcasts to the result's ``shape``, as ``alpha * a @ b + beta * c`` needs;
    ``name`` says which argument it is (``c[0]`` of a list)."""
    try:
        fits = np.broadcast_shapes(tuple(c_shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{what}: argument {name!r} has shape {tuple(c_shape)}, which does not broadcast to the "
                         f"result's {shape}")


def check_int32(what: str, **sizes: int) -> None:
    """cuBLAS's 32-bit interface: every size, leading dimension and batch count fits an int32."""
    for name, value in sizes.items():
        if value > _INT32_MAX:
            raise ValueError(f"{what}: {name} = {value} is over cuBLAS's 32-bit limit ({_INT32_MAX}); split the "
                             "product")


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one matrix lies in memory for cuBLAS: column-major as it is (``col``) or as its
    transpose (``row``, e.g. C order), with leading dimension ``ld`` in elements."""

    order: str
    ld: int


def matrix_layout(rows: int, cols: int, s_row: int, s_col: int) -> Optional[Layout]:
    """The layout of a ``rows`` x ``cols`` matrix with element strides (s_row, s_col), or None
    when cuBLAS cannot read it in place. A stride along an axis of length 1 is never used."""
    if rows <= 1 or s_row == 1:
        ld = s_col if cols > 1 else max(1, rows)
        if ld >= max(1, rows):
            return Layout("col", ld)
    if cols <= 1 or s_col == 1:
        ld = s_row if rows > 1 else max(1, cols)
        if ld >= max(1, cols):
            return Layout("row", ld)
    return None


def batch_stride(batch: Sequence[int], strides: Sequence[int]) -> Optional[int]:
    """One element stride that steps through all of ``batch`` in C order (0 for a broadcast
    operand), or None when the axes cannot be flattened into one stride. Axes of length 1 are
    ignored; ``strides`` are the operand's strides over ``batch`` (0 where it broadcasts)."""
    stride: Optional[int] = None
    expected = 0
    for size, step in zip(reversed(batch), reversed(strides)):
        if size == 1:
            continue
        if stride is None:
            stride, expected = step, step * size
        elif step != expected:
            return None
        else:
            expected = step * size
    if stride is not None and stride < 0:
        return None
    return 0 if stride is None else stride


@dataclasses.dataclass(frozen=True)
class Geometry:
    """One operand over the full batch: its flattened batch stride and its matrix strides, in elements."""

    batch: Optional[int]
    s_row: int
    s_col: int


def geometry(shape: Sequence[int], strides: Sequence[int], itemsize: int, batch: Sequence[int]) -> Optional[Geometry]:
    """The operand's ``Geometry`` against ``batch``, or None when a stride is not whole elements."""
    if any(s % itemsize for s in strides):
        return None
    elems = [s // itemsize for s in strides]
    own = len(shape) - 2
    full = [0] * (len(batch) - own) + [e if size != 1 else 0 for size, e in zip(shape[:own], elems[:own])]
    return Geometry(batch_stride(batch, full), elems[-2], elems[-1])


@dataclasses.dataclass(frozen=True)
class GemmCall:
    """One cuBLAS (strided-batched) GEMM call: ``first`` names the user operand ("a" or "b") that is
    cuBLAS's A; strides are per batch item, in elements."""

    first: str
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int


def _extent(rows: int, cols: int, g: Geometry) -> int:
    return 1 + (rows - 1) * abs(g.s_row) + (cols - 1) * abs(g.s_col)


def gemm_call(m: int, k: int, n: int, count: int, a: Optional[Geometry], b: Optional[Geometry],
              c: Optional[Geometry], features_first: bool = False) -> tuple[Optional[GemmCall], tuple[str, ...]]:
    """The call computing C = A @ B in place, or (None, operands to copy first): "a" and "b" are
    read through contiguous copies, "c" is computed in a temporary and copied into the output.

    ``features_first``: always as C^T = B^T A^T, so that cuBLAS's rows are C's columns (a
    cuBLASLt bias, added per row of cuBLAS's D, then lands on C's columns); a C whose columns
    are not contiguous (F order) is then computed in a temporary."""
    la = matrix_layout(m, k, a.s_row, a.s_col) if a is not None and a.batch is not None else None
    lb = matrix_layout(k, n, b.s_row, b.s_col) if b is not None and b.batch is not None else None
    lc = None
    if c is not None and c.batch is not None and (count <= 1 or c.batch >= _extent(m, n, c)):
        if features_first:  # C^T column-major: C's column index is cuBLAS's row
            lc = matrix_layout(n, m, c.s_col, c.s_row)
            lc = lc if lc is not None and lc.order == "col" else None
        else:
            lc = matrix_layout(m, n, c.s_row, c.s_col)
    if a is None or b is None or c is None or la is None or lb is None or lc is None:
        return None, tuple(name for name, layout in (("a", la), ("b", lb), ("c", lc)) if layout is None)
    sa, sb, sc = (g.batch or 0 for g in (a, b, c))
    if count <= 1:
        sa = sb = sc = 0
    if lc.order == "col" and not features_first:
        call = GemmCall("a", la.order == "row", lb.order == "row", m, n, k, la.ld, lb.ld, lc.ld, sa, sb, sc, count)
    else:  # C^T = B^T A^T, column-major
        call = GemmCall("b", lb.order == "col", la.order == "col", n, m, k, lb.ld, la.ld, lc.ld, sb, sa, sc, count)
    return call, ()


def host_scale(value: Any, dtype: Any, name: str, what: str) -> np.ndarray:
    """``alpha`` / ``beta`` given as a Python or NumPy number: a 0-d array of the scale dtype."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, complex, np.number)):
        raise TypeError(f"{what}: {name} must be a number or a one-element array, got {type(value).__name__}")
    scale = scale_dtype(dtype)
    if scale.kind == "f" and isinstance(value, (complex, np.complexfloating)):
        if value.imag != 0:
            raise TypeError(f"{what}: {name} = {value} is complex but the operands are {np.dtype(dtype)}")
        value = value.real
    return np.array(value, dtype=scale)


def check_scale_array(value: Any, dtype: Any, name: str, what: str) -> None:
    """``alpha`` / ``beta`` given as an array (read when the product runs, so at every replay)."""
    scale = scale_dtype(dtype)
    if value.dtype != scale or value.size != 1:
        raise TypeError(
            f"{what}: {name} given as an array must hold one {scale} value (the scale type of {np.dtype(dtype)} "
            f"operands), got {value.dtype}{list(value.shape)}; make it with cupygraph.linalg.scalar(value, "
            f"{np.dtype(dtype)})")


_CALLS: dict[tuple[Any, ...], GemmCall] = {}
_CALL_CACHE_SIZE = 4096  # distinct (shapes, strides) layouts whose call is kept; later ones are worked out per call


def resolve(a: Any, b: Any, c: Any, batch: tuple[int, ...], m: int, k: int, n: int, xp: Any,
            temporary: Any, features_first: bool = False) -> tuple[GemmCall, Any, Any, Any]:
    """The GEMM computing ``c = a @ b`` and the arrays it reads and writes: (call, a, b, target).

    Operands cuBLAS cannot read in place become contiguous copies (``xp.ascontiguousarray``); an
    output it cannot write in place is replaced by ``temporary()`` (C-ordered), which the caller
    copies back. ``features_first``: see ``gemm_call``.
    """
    key = (a.shape, a.strides, b.shape, b.strides, c.shape, c.strides, c.itemsize, batch, features_first)
    cached = _CALLS.get(key)
    if cached is not None:  # an eager call of a layout seen before: its GEMM call is kept
        return cached, a, b, c
    count = math.prod(batch)
    target = c
    for attempt in range(2):
        call, copies = gemm_call(m, k, n, count, geometry(a.shape, a.strides, a.itemsize, batch),
                                 geometry(b.shape, b.strides, b.itemsize, batch),
                                 geometry(target.shape, target.strides, target.itemsize, batch), features_first)
        if call is not None:
            if attempt == 0 and len(_CALLS) < _CALL_CACHE_SIZE:
                _CALLS[key] = call
            return call, a, b, target
        if "a" in copies:
            a = xp.ascontiguousarray(xp.broadcast_to(a, (*batch, m, k)))
        if "b" in copies:
            b = xp.ascontiguousarray(xp.broadcast_to(b, (*batch, k, n)))
        if "c" in copies:
            target = temporary()
    raise RuntimeError("no cuBLAS layout even for contiguous copies (a bug in cupygraph.linalg)")
