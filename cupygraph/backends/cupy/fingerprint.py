"""Whether device memory changed, told without a copy: a hash of an array's bytes on its device.

``cache/first_call.py`` fingerprints the arrays a function reads by address (constant arguments,
closure and global arrays) before and after the first call of a key runs it, to know whether the
warm-ups would write there again. A copy would tell it too, at the price of the weights' size in
memory for each capture; the hash (``kernels/fingerprint.cu``) reads the bytes once. It covers the
array's whole byte span (a strided view's gaps too: a write there by the function counts as one).

Imported only with the CuPy backend.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy

from ...kernels import get_kernel

__all__ = ["fingerprint"]

_THREADS = 256
_MAX_BLOCKS = 1024


def _span(array: Any) -> tuple[int, int]:
    """(first address, bytes) of the memory ``array``'s elements lie in (negative strides too)."""
    if array.size == 0:
        return int(array.data.ptr), 0
    low = high = int(array.data.ptr)
    for extent, stride in zip(array.shape, array.strides):
        if stride < 0:
            low += stride * (extent - 1)
        else:
            high += stride * (extent - 1)
    return low, high - low + array.itemsize


def fingerprint(array: Any) -> tuple[int, int, int]:
    """(bytes, sum, xor) of the mixed words of ``array``'s byte span: equal again only if no byte
    changed (up to a 128-bit hash collision). Waits for the current stream, whose work it follows."""
    start, nbytes = _span(array)
    with cupy.cuda.Device(array.data.device_id):
        out = cupy.zeros(2, dtype=cupy.uint64)
        if nbytes:
            words = start % 8 == 0 and nbytes % 8 == 0
            count = nbytes // 8 if words else nbytes
            kernel = get_kernel("fingerprint.cu",
                                "cupygraph_fingerprint_words" if words else "cupygraph_fingerprint_bytes")
            blocks = min(_MAX_BLOCKS, (count + _THREADS - 1) // _THREADS)
            kernel((blocks,), (_THREADS,), (numpy.uint64(start), numpy.int64(count), out))
        total, mixed = (int(v) for v in out.get())
    return nbytes, total, mixed
