"""``linalg.linear``: a dense layer, ``activation(x @ weight + bias)``, as one fused GEMM.

Backend-neutral: the leading axes of ``x`` become the rows of one 2-D product, which runs as
``gemm(..., bias=, activation=)`` on the backend the arrays live on (``_gemm_backend`` chooses, as for
``linalg.gemm``: cuBLASLt with the epilogue fused on the GPU, NumPy on the host).
"""

from __future__ import annotations

import math
from typing import Any

from ._gemm_backend import gemm

WHAT = "cupygraph.linalg.linear"


def linear(x: Any, weight: Any, bias: Any = None, *, activation: Any = None, out: Any = None) -> Any:
    """``activation(x @ weight + bias)`` for ``x`` of shape (..., in_features) and ``weight`` of
    shape (in_features, out_features) (``weight.T`` of a PyTorch-style layer: a view, no copy)."""
    for name, value in (("x", x), ("weight", weight)):
        if not hasattr(value, "ndim") or not hasattr(value, "reshape"):
            raise TypeError(f"{WHAT}: argument {name!r} must be an array, got {type(value).__name__}")
    if weight.ndim != 2:
        raise ValueError(f"{WHAT}: weight must be 2-D (in_features, out_features), got shape {tuple(weight.shape)}")
    if x.ndim < 1:
        raise ValueError(f"{WHAT}: x must be at least 1-D (..., in_features), got a 0-d array")
    features, outputs = weight.shape
    if x.shape[-1] != features:
        raise ValueError(f"{WHAT}: x has {x.shape[-1]} features (the last axis of shape {tuple(x.shape)}) but weight "
                         f"has {features} rows; weight is (in_features, out_features) and the layer computes "
                         "x @ weight (pass weight.T for a PyTorch-style (out_features, in_features) weight)")
    if x.ndim == 2:
        return gemm(x, weight, bias=bias, activation=activation, out=out, what=WHAT)
    lead = tuple(x.shape[:-1])
    rows = math.prod(lead)
    flat_out = None
    if out is not None:
        if not hasattr(out, "shape") or tuple(out.shape) != (*lead, outputs):
            raise ValueError(f"{WHAT}: out has shape {tuple(getattr(out, 'shape', ()))} but the result is "
                             f"{(*lead, outputs)}")
        if not out.flags.c_contiguous:
            raise ValueError(f"{WHAT}: out must be C-contiguous where x is not 2-D (it is written through a 2-D "
                             "view of it)")
        flat_out = out.reshape(rows, outputs)
    result = gemm(x.reshape(rows, features), weight, bias=bias, activation=activation, out=flat_out, what=WHAT)
    return out if out is not None else result.reshape(*lead, outputs)
