"""The issue-30 chain's kernel sources, shared by the GPU tests that run them
(tests/gpu/test_pdl_cupy_kernels.py) and the CPU test that compiles and scans them with NVRTC
(tests/unit/test_pdl_discovery.py), so a source the GPU tests rely on is checked without a GPU."""

from __future__ import annotations

from importlib import resources

SIGNATURE = "(const float* x, float* y, int n, int spin)"
BODY = r'''
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] * 0.999f + 0.5f;
        for (int k = 0; k < spin; ++k) v = v * 0.999f + 0.001f;
        y[i] = v;
    }
'''
# The opening, as inline PTX: let the next kernel launch, then wait for this one's producers.
TRIGGER_AND_WAIT = 'asm volatile("griddepcontrol.launch_dependents;\\n\\tgriddepcontrol.wait;" ::: "memory")'
WAITING = f'extern "C" __global__ void chain_step{SIGNATURE} {{\n    {TRIGGER_AND_WAIT};\n{BODY}}}\n'
PLAIN = f'extern "C" __global__ void chain_step{SIGNATURE} {{\n{BODY}}}\n'
# The shipped header #included by path, as with a plain cupy.RawModule.
HEADER = (f'#include "pdl.cuh"\nextern "C" __global__ void chain_step{SIGNATURE} {{\n'
          f'    CUPYGRAPH_PDL_TRIGGER();\n    CUPYGRAPH_PDL_WAIT();\n{BODY}}}\n')
HEADER_OPTIONS = (f"-I{resources.files('cupygraph.kernels')}",)
# An ElementwiseKernel's loop_prep: CuPy puts it first in the kernel, before its loop.
LOOP_PREP = TRIGGER_AND_WAIT
