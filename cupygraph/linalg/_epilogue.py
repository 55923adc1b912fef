"""What a fused GEMM epilogue does, and the checks of its arguments: one definition for the GPU
(cuBLASLt's epilogue, or its unfused stand-in) and the NumPy reference.

``activation(alpha * op(a) @ op(b) + beta * c + bias)``, evaluated in the scale type (float32 for
float16 operands) and rounded once to the result's dtype. ``bias`` is a vector with one value per
column of the result (one per output feature of ``linear``), shared by every matrix of a batch.

* ``"relu"``: ``v if v > 0 else 0``, and a NaN stays NaN: what cuBLASLt's ReLU epilogue gives
  (measured on an H200, CUDA 13.2, 2026-11-27: ``tests/gpu/test_linalg_lt_gpu.py``), as ``torch.relu``.
* ``"gelu"``: the tanh approximation cuBLASLt's GELU epilogue computes (PyTorch's
  ``gelu(approximate="tanh")``): ``0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 * v**3)))``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

ACTIVATIONS = ("relu", "gelu")
EPILOGUE_DTYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))
"""The result dtypes with a bias or activation epilogue (cuBLASLt has none for complex products)."""
GELU_SCALE = 0.7978845608028654  # sqrt(2 / pi)
GELU_CUBIC = 0.044715


def activation_name(activation: Any, what: str) -> Optional[str]:
    """``activation`` as one of ``ACTIVATIONS`` (case and surrounding blanks ignored), or None."""
    if activation is None:
        return None
    name = activation.strip().lower() if isinstance(activation, str) else None
    if name not in ACTIVATIONS:
        raise ValueError(f"{what}: activation={activation!r} is not an activation; valid: None, "
                         f"{', '.join(repr(a) for a in ACTIVATIONS)}")
    return name


def checked_gemm(a: Any, b: Any, dtype: np.dtype, bias: Any, activation: Any, what: str) -> Optional[str]:
    """The checks every ``gemm`` (GPU and host) makes before its shapes: both operands at least 2-D, and
    a result ``dtype`` with an epilogue where a bias or an activation is asked; the activation's name."""
    act = activation_name(activation, what)
    for name, x in (("a", a), ("b", b)):
        if x.ndim < 2:
            raise ValueError(f"{what}: argument {name!r} must be at least 2-D (use cupygraph.matmul for vectors), "
                             f"got shape {x.shape}")
    if bias is not None or act is not None:
        check_epilogue_dtype(dtype, what)
    return act


def check_epilogue_dtype(dtype: np.dtype, what: str) -> None:
    if dtype not in EPILOGUE_DTYPES:
        raise TypeError(f"{what}: a bias or activation needs a {', '.join(str(t) for t in EPILOGUE_DTYPES)} "
                        f"product, but the operands make {dtype}; cast them with .astype first")


def check_bias_type(bias: Any, array_type: type, what: str) -> None:
    if not isinstance(bias, array_type):
        raise TypeError(f"{what}: bias must be a {array_type.__module__.split('.')[0]} array like the operands, got "
                        f"{type(bias).__name__}")


def check_bias(bias: Any, columns: int, dtype: np.dtype, what: str) -> None:
    """``bias`` (an array of the operands' kind, checked first by the caller) is 1-D with ``columns`` values
    of the result's ``dtype``."""
    if bias.shape != (columns,):
        raise ValueError(f"{what}: bias has shape {tuple(bias.shape)} but the result has {columns} columns: it "
                         f"must be 1-D with one value per column, shape ({columns},)")
    if bias.dtype != dtype:
        raise TypeError(f"{what}: bias is {bias.dtype} but the product is {dtype}; cast it with "
                        f"bias.astype({dtype.name!r})")


def apply_host(value: np.ndarray, bias: Optional[np.ndarray], activation: Optional[str]) -> np.ndarray:
    """The epilogue on ``value`` (already in the scale type), in place where it can be."""
    if bias is not None:
        value = value + bias.astype(value.dtype, copy=False)
    if activation == "relu":
        value = np.where((value > 0) | np.isnan(value), value, value.dtype.type(0))
    elif activation == "gelu":
        inner = value.dtype.type(GELU_SCALE) * (value + value.dtype.type(GELU_CUBIC) * value * value * value)
        value = value.dtype.type(0.5) * value * (value.dtype.type(1) + np.tanh(inner))
    return value
