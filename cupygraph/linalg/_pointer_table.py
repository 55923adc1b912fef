"""Device arrays of matrix addresses for ``cublasGemmBatchedEx``, written by a kernel.

The addresses are the kernel's launch parameters (32 per launch), so building a table needs no
host-to-device copy and captures like any kernel: every replay rewrites the same addresses into
the table before the GEMM reads them, which makes the table an ordinary intermediate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

CHUNK = 32
_PARAMS = ", ".join(f"unsigned long long p{i}" for i in range(CHUNK))
_VALUES = ", ".join(f"p{i}" for i in range(CHUNK))
POINTER_TABLE_SOURCE = f"""
extern "C" __global__ void cupygraph_pointer_table(unsigned long long* table, int count, {_PARAMS}) {{
    const unsigned long long p[{CHUNK}] = {{{_VALUES}}};
    const int i = threadIdx.x;
    if (i < count) table[i] = p[i];
}}
"""
_kernels: list[Any] = []


def pointer_table(pointers: Sequence[int]) -> Any:
    """A CuPy uint64 array holding ``pointers``, on the current device and stream."""
    import cupy

    if not _kernels:  # a RawKernel compiles once per device by itself
        _kernels.append(cupy.RawKernel(POINTER_TABLE_SOURCE, "cupygraph_pointer_table"))
    kernel = _kernels[0]
    table = cupy.empty(len(pointers), dtype=cupy.uint64)
    for start in range(0, len(pointers), CHUNK):
        chunk = [np.uint64(p) for p in pointers[start:start + CHUNK]]
        padding = [np.uint64(0)] * (CHUNK - len(chunk))
        kernel((1,), (CHUNK,), (table[start:], np.int32(len(chunk)), *chunk, *padding))
    return table
