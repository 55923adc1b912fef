"""Which backend runs a ``gemm``: the one owner of that choice, for ``linalg.gemm`` and ``linalg.linear``.

CuPy arrays (any of the operands or ``out``) run on cuBLAS / cuBLASLt (``_gemm_cupy``), the rest on
NumPy, the host reference (``_gemm_host``); both check their arguments and name ``what`` in errors.
"""

from __future__ import annotations

from typing import Any, Optional

from ..backends.base import on_gpu


def gemm(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
         trans_b: bool = False, out: Any = None, bias: Any = None, activation: Optional[str] = None,
         what: str = "cupygraph.linalg.gemm") -> Any:
    """``linalg.gemm`` (its docstring) on the backend the arrays live on; ``what`` names the caller."""
    if on_gpu(a, b, c, out):
        from . import _gemm_cupy

        return _gemm_cupy.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out, bias=bias,
                               activation=activation, what=what)
    from . import _gemm_host

    return _gemm_host.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out, bias=bias,
                           activation=activation, what=what)
