"""Matrix products that stay inside a CUDA graph: cuBLAS on a handle bound to the capture stream.

CuPy refuses cuBLAS under stream capture, so ``cupy.matmul`` / ``@`` / ``dot`` force a graph
break. These functions call cuBLAS directly, on this thread's handle bound to the current stream
with a workspace preallocated for that stream, so the same call runs eagerly and is recorded as
ordinary GEMM nodes inside a FULL graph (nothing is allocated during the capture). On NumPy
arrays (the host backend) they run NumPy with the same checks, errors and results.

* ``matmul(a, b, out=None)``: NumPy's ``matmul`` (1-D, 2-D and batched operands, broadcasting)
  for float16, float32, float64, complex64 and complex128, any strides (C or F order, views).
* ``gemm(a, b, c=None, *, alpha=1, beta=0, trans_a=False, trans_b=False, out=None)``:
  ``alpha * op(a) @ op(b) + beta * c``; operands of 3 or more axes run as one strided-batched
  GEMM. ``out=c`` updates c in place. BLAS rule: with beta == 0, c is not read.
* ``gemm_strided_batched``: ``gemm`` on 3-D operands (a batch of matrices at a fixed stride).
* ``gemm_batched(a_list, b_list, c_list=None, ...)``: one pointer-array GEMM over lists of equally
  shaped matrices at arbitrary addresses.
* alpha/beta given as numbers are frozen into a captured graph; given as one-element arrays
  (``scalar(value, like=a)``) they are read at every replay (cuBLAS's device pointer mode), so
  they can change between replays.
* ``linear(x, weight, bias=None, *, activation=None, out=None)``: a dense layer,
  ``activation(x @ weight + bias)`` with ``weight`` of shape (in_features, out_features), and
  ``gemm(..., bias=, activation=)``: ``activation(alpha * op(a) @ op(b) + beta * c + bias)``, bias
  one value per result column; activation ``"relu"`` or ``"gelu"`` (tanh approximation); float16,
  float32, float64. One ``cublasLtMatmul`` with the epilogue fused, on the fastest of the algorithms
  cuBLASLt's heuristic proposes for that shape (``_lt_tuning``), chosen once per shape
  (``gemm_plans()`` lists them with their times).

Precision: float32 products use full float32 (no TF32); float16 products sum in float32. Results
are bit-for-bit the same eagerly and in a graph replay (same handle settings, same workspace size,
same algorithm); against ``cupy.matmul`` they agree to rounding. The fused products run another
library call (cuBLASLt, and another kernel than ``cublasGemmEx`` may pick), so against ``matmul``
followed by the epilogue they agree to rounding only. The cuBLAS and cuBLASLt bindings are chosen
in ``_binding`` (nvmath-python where installed, else ctypes on the libcublas CuPy loads).

Factorisations on cuSOLVER (``_public_solvers``): ``solve``, ``inv``, ``cholesky``, ``qr``, ``eigh``,
``svd``, ``slogdet`` and ``det`` with NumPy's results; a numerical failure (singular, not positive definite, no
convergence) gives NaN results and a non-zero ``info`` (``return_info=True``; ``check(info)``
raises ``LinAlgFailure``) instead of an exception, since a graph cannot raise. ``eigh`` and ``svd``
capture for matrices up to 32 x 32 (cuSOLVER's XsyevBatched and gesvdjBatched); larger ones run
``syevd`` / ``gesvd``, which fail under stream capture, so those keys run eagerly. ``tensordot``
and two-operand ``einsum`` are NumPy's, on ``matmul``; ``spmm(csr, dense)`` and
``spmm(dense, csr)`` are cuSPARSE SpMM.

Layer 4 (with control_flow and random): may import foundation, config, dispatch and backends only.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..backends.base import on_gpu as _on_gpu
from . import _gemm_backend
from ._binding import load_binding
from ._contract import einsum, tensordot
from ._library import BINDINGS, CublasError
from ._linear import linear
from ._public_solvers import LinAlgFailure, check, cholesky, det, eigh, inv, qr, slogdet, solve, spmm, svd
from ._shapes import SUPPORTED, scale_dtype

__all__ = [
    "BINDINGS",
    "SUPPORTED",
    "CublasError",
    "LinAlgFailure",
    "binding_info",
    "check",
    "cholesky",
    "det",
    "eigh",
    "einsum",
    "gemm",
    "gemm_batched",
    "gemm_plans",
    "gemm_strided_batched",
    "inv",
    "linear",
    "load_binding",
    "matmul",
    "prepare",
    "qr",
    "release_unused",
    "resources",
    "scalar",
    "slogdet",
    "solve",
    "spmm",
    "svd",
    "tensordot",
]


def matmul(a: Any, b: Any, /, out: Optional[Any] = None) -> Any:
    """``a @ b`` with NumPy's ``matmul`` semantics; on CuPy arrays through cuBLAS, capturable.

    Returns ``out`` when given (its shape and dtype must be the result's), else a new C-ordered
    array. Integer and bool operands are refused (cuBLAS has no such GEMM): cast them first.
    """
    if _on_gpu(a, b, out):
        from . import _gemm_cupy

        return _gemm_cupy.matmul(a, b, out)
    from . import _gemm_host

    return _gemm_host.matmul(a, b, out)


def gemm(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
         trans_b: bool = False, out: Any = None, bias: Any = None, activation: Optional[str] = None) -> Any:
    """``activation(alpha * op(a) @ op(b) + beta * c + bias)`` (op transposes the last two axes when
    asked; no conjugation; without bias and activation, ``alpha * op(a) @ op(b) + beta * c``).

    ``a`` and ``b`` are at least 2-D; their leading axes broadcast as in ``matmul`` and run as one
    strided-batched GEMM. ``c`` broadcasts to the result. The result goes to a new array, or to
    ``out`` (``out=c``: c is updated in place). alpha and beta as one-element arrays of the scale
    dtype (float32 for float16 operands; see ``scalar``) are read on the device at every run.
    ``bias`` (1-D, one value per result column, the result's dtype) and ``activation`` (None,
    ``"relu"`` or ``"gelu"``, tanh approximation) make it one cuBLASLt product with that epilogue
    fused (float16, float32 and float64 only).
    """
    return _gemm_backend.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out, bias=bias,
                              activation=activation)


def gemm_strided_batched(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0,
                         trans_a: bool = False, trans_b: bool = False, out: Any = None) -> Any:
    """``gemm`` on a batch of matrices: a, b (and c, out) are 3-D, one matrix per leading index
    (a leading axis of length 1 is shared by the whole batch)."""
    for name, x in (("a", a), ("b", b)):
        if getattr(x, "ndim", None) != 3:
            raise ValueError(f"cupygraph.linalg.gemm_strided_batched: argument {name!r} must be 3-D (batch, rows, "
                             f"columns), got shape {getattr(x, 'shape', type(x).__name__)}")
    return gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out)


def gemm_batched(a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = 0.0, trans_a: bool = False,
                 trans_b: bool = False, out: Any = None) -> Any:
    """``out[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i]`` for lists of equally shaped 2-D matrices.

    Returns ``out`` when given (a list of matrices), else a new (count, M, N) array.
    """
    first = a[0] if isinstance(a, (list, tuple)) and a else a
    if _on_gpu(first):
        from . import _batched

        return _batched.gemm_batched(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out)
    from . import _gemm_host

    return _gemm_host.gemm_batched(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b, out=out)


def scalar(value: Any, *, like: Any) -> Any:
    """``value`` as a one-element array that ``gemm`` reads at every run (device pointer mode).

    Its dtype is the scale dtype for operands like ``like`` (float32 for float16 operands); it
    lives where ``like`` lives. Change it in place (``s[...] = 0.5``) between graph replays.
    """
    if not hasattr(like, "dtype") or np.dtype(like.dtype) not in SUPPORTED:
        raise TypeError(f"cupygraph.linalg.scalar: like must be an operand array of one of "
                        f"{', '.join(str(t) for t in SUPPORTED)}, got {getattr(like, 'dtype', type(like).__name__)}")
    dtype = scale_dtype(like.dtype)
    if _on_gpu(like):
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.full((), value, dtype=dtype)
    return np.full((), value, dtype=dtype)


def prepare(stream: Any = None) -> None:
    """Make this thread's cuBLAS and cuBLASLt handles and the workspace of ``stream`` (default: the
    current one) now, so that a capture started by hand on that stream allocates nothing. ``jit``
    needs none of this: its warm-up does it. A fused product (``linear``, ``gemm`` with a bias or
    activation) also needs its plan: run it once on arrays of the same shapes before capturing it by
    hand."""
    import cupy

    from ._cublas_handles import handle_for, lt_handle_for

    stream = cupy.cuda.get_current_stream() if stream is None else stream
    handle_for(cupy.cuda.Device().id, stream)
    lt_handle_for(cupy.cuda.Device().id, stream)


def release_unused() -> dict[str, int]:
    """Free the workspaces kept for eagerly used streams and destroy handles no thread or graph
    holds; what captured graphs hold stays. Returns ``resources()``."""
    from ._cublas_handles import release_unused as release

    return release()


def resources() -> dict[str, int]:
    """Live cuBLAS and cuBLASLt handles, workspaces and workspace bytes of this process (0 where none
    was made)."""
    import sys

    handles = sys.modules.get(f"{__name__}._cublas_handles")
    if handles is None:
        return {"handles": 0, "lt_handles": 0, "workspaces": 0, "workspace_bytes": 0}
    counts: dict[str, int] = handles.resources()
    return counts


def gemm_plans() -> list[dict[str, Any]]:
    """The fused products' shapes whose cuBLASLt algorithm was chosen in this process (cuBLAS's
    column-major m, n, k: m is the result's columns), their epilogue, and whether each runs fused
    (else ``reason`` says why it runs as a GEMM and a separate epilogue kernel)."""
    import sys

    plans = sys.modules.get(f"{__name__}._lt_plans")
    return [] if plans is None else list(plans.gemm_plans())


def binding_info() -> dict[str, Any]:
    """Which cuBLAS and cuBLASLt bindings this process uses, the libraries they loaded and their versions."""
    import cupy

    from ._cublas_handles import handle_for
    from ._lt_binding import CUBLASLT

    handle = handle_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream())
    lib, lt = handle.lib, CUBLASLT.binding()
    return {"binding": lib.name, "library": lib.library_path, "version": lib.version(handle.ptr),
            "lt_binding": lt.name, "lt_library": lt.library_path, "lt_version": lt.version()}
