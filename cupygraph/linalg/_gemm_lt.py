"""Fused GEMMs of CuPy arrays on cuBLASLt: ``linalg.linear`` and ``gemm(..., bias=, activation=)``.

``_gemm_cupy.product`` lays a fused product out feature-major (cuBLAS's rows are the result's
columns, ``_shapes.gemm_call(features_first=True)``): cuBLASLt adds its bias per row of D, so the
bias lands on the result's columns, one value per output feature, for one row or many. Then
``fused_product`` runs it on this thread's cuBLASLt handle with the stream's workspace
(``_cublas_handles``) and the plan of its key (``_lt_plans``: algorithm chosen once per key, the
fastest of the heuristic's proposals, timed in small graphs by ``GraphTimer``; nothing made during a
capture). A key cuBLASLt has no algorithm for runs unfused: the same layout through
``cublasGemmEx``, then ``apply_unfused``, one elementwise kernel with the same arithmetic
(``_epilogue``). Both capture like any CuPy kernel.
"""

from __future__ import annotations

from typing import Any, Optional

import cupy
import numpy as np

from ..backends.capturing import stream_is_capturing
from ._cublas_handles import lt_handle_for
from ._epilogue import GELU_CUBIC, GELU_SCALE
from ._lt_plans import EPILOGUES, Operands, execute
from ._shapes import GemmCall

_ACTIVATION_CODE = {None: 0, "relu": 1, "gelu": 2}


class GraphTimer:
    """``_lt_tuning.Timer`` for one CuPy stream: back-to-back runs captured into a graph on a side stream
    (relaxed mode: other threads' calls are not restricted by it), the launch timed with CUDA events.
    Scratch comes from CuPy's pool and is held until the timer is dropped (after its last timing
    synchronised)."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._side: Optional[Any] = None
        self._held: list[Any] = []

    def scratch(self, nbytes: int) -> int:
        memory = cupy.cuda.alloc(max(1, nbytes))
        self._held.append(memory)
        return int(memory.ptr)

    def seconds(self, run: Any, repeats: int) -> float:
        if self._side is None:
            self._side = cupy.cuda.Stream(non_blocking=True)
        side = self._side
        side.wait_event(self._stream.record())  # after the product's own stream's earlier work
        side.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        try:
            for _ in range(repeats):
                run(int(side.ptr))
        finally:
            graph = side.end_capture()
        graph.launch(side)  # uploads the graph: the timed launch measures the kernels alone
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(side)
        graph.launch(side)
        end.record(side)
        end.synchronize()
        return float(cupy.cuda.get_elapsed_time(start, end)) * 1e-3 / repeats


class Epilogue:
    """What follows the product: a bias (a CuPy vector, one value per result column) and an activation."""

    def __init__(self, bias: Optional[Any], activation: Optional[str]):
        self.bias, self.activation = bias, activation
        self.code = EPILOGUES[(bias is not None, activation)]


def fused_product(call: GemmCall, first: Any, second: Any, target: Any, scalars: Any, epilogue: Epilogue,
                  stream: Any) -> bool:
    """``call`` with its epilogue on cuBLASLt, writing ``target``; False where the key has no
    algorithm (the caller then runs it unfused). ``scalars``: ``_gemm_cupy.Scalars``."""
    device_id = int(target.device.id)
    handle, workspace = lt_handle_for(device_id, stream)
    alpha, beta = scalars.pointers
    operands = Operands(int(first.data.ptr), int(second.data.ptr), int(target.data.ptr),
                        0 if epilogue.bias is None else int(epilogue.bias.data.ptr), alpha, beta)
    return execute(handle.lib, handle.ptr, handle.plans, device_id, call, target.dtype.char, epilogue.code,
                   scalars.mode, operands, workspace.ptr, workspace.nbytes, int(stream.ptr),
                   stream_is_capturing(stream), lambda: GraphTimer(stream))


_PREAMBLE = """
template <typename T> struct cupygraph_epilogue_acc { typedef float type; };
template <> struct cupygraph_epilogue_acc<double> { typedef double type; };
"""
_BODY = f"""
typedef cupygraph_epilogue_acc<T>::type A;
A v = (A)y + (A)bias;
if (act == 1) {{
    v = (v > (A)0 || v != v) ? v : (A)0;  /* NaN stays NaN, as cuBLASLt's ReLU epilogue gives it */
}} else if (act == 2) {{
    v = (A)0.5 * v * ((A)1 + tanh((A){GELU_SCALE!r} * (v + (A){GELU_CUBIC!r} * v * v * v)));
}}
y = (T)v;
"""
_kernel: Optional[Any] = None


def apply_unfused(target: Any, epilogue: Epilogue) -> None:
    """``target = activation(target + bias)`` in place, in float32 for float16 (as cuBLASLt's epilogue)."""
    global _kernel
    if epilogue.bias is None and epilogue.activation is None:
        return
    if _kernel is None:
        _kernel = cupy.ElementwiseKernel("T bias, int32 act", "T y", _BODY, "cupygraph_gemm_epilogue",
                                         preamble=_PREAMBLE)
    # No bias: a host scalar zero, passed by value; a device zero would be a memset node in every capture.
    bias = epilogue.bias if epilogue.bias is not None else target.dtype.type(0)
    _kernel(bias, np.int32(_ACTIVATION_CODE[epilogue.activation]), target)
