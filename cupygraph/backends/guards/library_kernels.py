"""Which library a kernel of a captured graph belongs to, by its (mangled) name.

The address audit asks only when the recording holds library state (cuFFT plans, cuBLAS, cuSOLVER
and cuSPARSE handles, NCCL communicators: ``backends/holding.py``). Such a kernel's addresses outside
the graph's own memory are then the library's internal memory, held with the plan or handle, not
memory of unknown owner. A library kernel not named here is reported as unknown (a warning, never a
wrong result).
"""

from __future__ import annotations

from typing import Optional

from ..cupy.fft import is_cufft_kernel

_LIBRARY_KERNELS = (
    # NCCL's kernels (ncclDevKernel_AllReduce_..., mangled) read its communicator's own memory.
    ("NCCL", ("ncclDevKernel", "ncclKernel")),
    ("cuSPARSE", ("cusparse",)),
    # cuBLAS passes opaque parameter structs (cublasZgemm1x1Params) whose words may hold its own
    # memory or stale host bytes (seen once on an H100: a word equal to an allocation's base).
    ("cuBLAS", ("cublas", "nvjet", "xmma_gemm", "gemv2", "gemvx", "gemmSN", "gemmk1")),
    ("cuSOLVER", ("getrf", "getrs", "potrf", "potrs", "potri", "geqrf", "geqr2", "orgqr", "ungqr", "ormqr",
                  "unmqr", "laswp", "trtri", "larft", "larfb", "syevj", "heevj", "gesvdj", "sytrd", "hetrd",
                  "stedc", "steqr", "bdsqr", "gebrd", "syevBatched", "heevBatched")),
)


def library_of(name: str) -> Optional[str]:
    """The library whose kernel ``name`` is, asked only when the recording holds library state (plans,
    handles, communicators: ``backends/holding.py``): that kernel's addresses outside the graph's own
    memory are the library's internal memory, held with its handle."""
    if is_cufft_kernel(name):
        return "cuFFT"
    for library, markers in _LIBRARY_KERNELS:
        if any(marker in name for marker in markers):
            return library
    return None
