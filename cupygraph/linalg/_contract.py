"""Tensor contractions as one ``matmul`` of reshaped operands, so they capture on the GPU.

``tensordot`` and two-operand ``einsum`` move the summed axes of each operand together, reshape
to matrices (with the shared batch axes of ``einsum`` in front) and call the backend's ``matmul``:
one (strided-batched) GEMM through cupygraph's cuBLAS path on CuPy arrays, NumPy's on host arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backends.base import on_gpu as _on_gpu


def _matmul(a: Any, b: Any) -> Any:
    if _on_gpu(a, b):
        from ._gemm_cupy import matmul

        return matmul(a, b, None)
    from ._gemm_host import matmul as host_matmul

    return host_matmul(a, b, None)


def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
    """NumPy's ``tensordot(a, b, axes)`` as one ``matmul`` of reshaped operands (captures on the GPU)."""
    if isinstance(axes, (int, np.integer)):  # (a NumPy integer too, as np.tensordot takes it)
        axes = int(axes)
        if axes < 0:
            raise ValueError(f"cupygraph.linalg.tensordot: axes must be >= 0, got {axes}")
        a_axes, b_axes = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        try:
            a_axes, b_axes = ([int(axes[0])] if isinstance(axes[0], (int, np.integer)) else list(axes[0]),
                              [int(axes[1])] if isinstance(axes[1], (int, np.integer)) else list(axes[1]))
        except (TypeError, IndexError) as err:
            raise ValueError(f"cupygraph.linalg.tensordot: axes must be an int or a pair of axis lists, got {axes!r}"
                             ) from err
    a_axes, b_axes = _axes(a_axes, a.ndim, "a", axes), _axes(b_axes, b.ndim, "b", axes)
    if len(a_axes) != len(b_axes) or any(a.shape[i] != b.shape[j] for i, j in zip(a_axes, b_axes)):
        raise ValueError(f"cupygraph.linalg.tensordot: shape mismatch for sum: a{tuple(a.shape)} axes {a_axes}, "
                         f"b{tuple(b.shape)} axes {b_axes}")
    a_free = [i for i in range(a.ndim) if i not in a_axes]
    b_free = [j for j in range(b.ndim) if j not in b_axes]
    k = math.prod([a.shape[i] for i in a_axes])
    m = math.prod([a.shape[i] for i in a_free])
    n = math.prod([b.shape[j] for j in b_free])
    a2 = a.transpose(a_free + a_axes).reshape(m, k)
    b2 = b.transpose(b_axes + b_free).reshape(k, n)
    return _matmul(a2, b2).reshape([a.shape[i] for i in a_free] + [b.shape[j] for j in b_free])




def einsum(subscripts: str, a: Any, b: Any) -> Any:
    """NumPy's ``einsum`` for two operands with explicit output (``"bij,bjk->bik"``), as one matmul.

    Each index appears at most once per operand (no traces, no ``...``); an index of one operand
    only and not in the output is summed first.
    """
    what = "cupygraph.linalg.einsum"
    try:
        inputs, output = subscripts.replace(" ", "").split("->")
        sa, sb = inputs.split(",")
    except ValueError as err:
        raise ValueError(f"{what}: subscripts must read 'ab,bc->ac' (two operands, explicit output), got "
                         f"{subscripts!r}") from err
    for name, labels, x in (("a", sa, a), ("b", sb, b)):
        if len(set(labels)) != len(labels) or not labels.isalpha() or len(labels) != x.ndim:
            raise ValueError(f"{what}: operand {name!r} has subscripts {labels!r} for shape {tuple(x.shape)}: "
                             "give one distinct letter per axis (no repeated indices, no '...')")
    if len(set(output)) != len(output) or not set(output) <= set(sa) | set(sb):
        raise ValueError(f"{what}: output subscripts {output!r} must be distinct letters of the operands")
    # An index of one operand only that the output drops: sum it away first.
    drop = [i for i, c in enumerate(sa) if c not in output and c not in sb]
    if drop:
        a, sa = a.sum(axis=tuple(drop)), "".join(c for i, c in enumerate(sa) if i not in drop)
    drop = [i for i, c in enumerate(sb) if c not in output and c not in sa]
    if drop:
        b, sb = b.sum(axis=tuple(drop)), "".join(c for i, c in enumerate(sb) if i not in drop)
    batch = [c for c in output if c in sa and c in sb]
    summed = [c for c in sa if c in sb and c not in output]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    size = {c: a.shape[sa.index(c)] for c in sa} | {c: b.shape[sb.index(c)] for c in sb}
    for c in set(sa) & set(sb):
        if a.shape[sa.index(c)] != b.shape[sb.index(c)]:
            raise ValueError(f"{what}: index {c!r} is {a.shape[sa.index(c)]} in a but {b.shape[sb.index(c)]} in b")
    a3 = a.transpose([sa.index(c) for c in batch + free_a + summed]).reshape(
        math.prod(size[c] for c in batch), math.prod(size[c] for c in free_a), math.prod(size[c] for c in summed))
    b3 = b.transpose([sb.index(c) for c in batch + summed + free_b]).reshape(
        math.prod(size[c] for c in batch), math.prod(size[c] for c in summed), math.prod(size[c] for c in free_b))
    order = batch + free_a + free_b
    result = _matmul(a3, b3).reshape([size[c] for c in order])
    return result.transpose([order.index(c) for c in output])


def _axes(chosen: list[Any], ndim: int, name: str, axes: Any) -> list[int]:
    """``chosen`` axes of operand ``name`` made non-negative; NumPy's errors for out-of-range or repeated ones."""
    if any(not -ndim <= int(ax) < ndim for ax in chosen):
        raise ValueError(f"cupygraph.linalg.tensordot: axes {axes!r} name an axis {name} does not have "
                         f"({name} has {ndim} dimensions)")
    out = [int(ax) % ndim for ax in chosen]
    if len(set(out)) != len(out):
        raise ValueError(f"cupygraph.linalg.tensordot: axes {axes!r} repeat an axis of {name}")
    return out
