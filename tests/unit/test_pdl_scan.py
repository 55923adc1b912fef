"""The PDL header compiles with NVRTC, and the PTX scan finds which kernels wait (issue 18).

NVRTC needs no GPU: each kernel here is compiled for compute_90 (and compute_80, where the
macros vanish) and its PTX scanned exactly as the GPU backend scans a module it recognises.
"""

from __future__ import annotations

import pytest
from extras import needs_nvrtc

from cupygraph import with_pdl
from cupygraph.backends.pdl.modules import compile_ptx, cupy_compile_options
from cupygraph.backends.pdl.ptx_scan import entry_verdicts, may_wait
from cupygraph.kernels import SOURCES, kernel_source

needs_nvrtc("the PTX scan's compile of the PDL header")

KERNELS = r'''
extern "C" __global__ void top(const float* x, float* y, int n) {
    CUPYGRAPH_PDL_TRIGGER();
    CUPYGRAPH_PDL_WAIT();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void after_return(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    CUPYGRAPH_PDL_WAIT();
    y[i] = 2.0f * x[i];
}
extern "C" __global__ void reads_first(const float* x, float* y, int n) {
    float v = x[0];
    CUPYGRAPH_PDL_WAIT();
    y[threadIdx.x] = v;
}
extern "C" __global__ void writes_first(float* y) {
    y[threadIdx.x] = 1.0f;
    CUPYGRAPH_PDL_WAIT();
}
extern "C" __global__ void never(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }
extern "C" __global__ void shared_first(const float* x, float* y) {
    __shared__ float s[32];
    s[threadIdx.x % 32] = 0.0f;
    __syncthreads();
    CUPYGRAPH_PDL_WAIT();
    y[threadIdx.x] = x[threadIdx.x] + s[threadIdx.x % 32];
}
'''


def verdicts(arch: int = 90) -> dict:
    return entry_verdicts(compile_ptx(with_pdl(KERNELS), ("--std=c++17",), arch))


def test_a_wait_at_the_top_is_found_and_trigger_before_it_is_harmless():
    found = verdicts()
    assert found["top"].waits
    assert found["shared_first"].waits, found["shared_first"].reason


@pytest.mark.parametrize("name, why", [
    ("after_return", "branch"),
    ("reads_first", "global or generic memory access"),
    ("writes_first", "global or generic memory access"),
    ("never", "no griddepcontrol.wait"),
])
def test_kernels_that_may_touch_memory_before_waiting_do_not_wait(name: str, why: str):
    verdict = verdicts()[name]
    assert not verdict.waits
    assert why in verdict.reason


def test_before_sm90_the_macros_compile_to_nothing():
    assert not any(v.waits for v in verdicts(80).values())
    assert "griddepcontrol" not in compile_ptx(with_pdl(KERNELS), (), 80)


@pytest.mark.parametrize("source", SOURCES)
def test_every_shipped_kernel_waits_on_sm90(source: str):
    found = entry_verdicts(compile_ptx(kernel_source(source), ("--std=c++17",), 90))
    assert found, f"no kernels in {source}"
    assert {name: v.reason for name, v in found.items() if not v.waits} == {}


def test_a_user_arch_option_is_replaced_by_the_scanned_architecture():
    for options in (("-arch=sm_80", "--std=c++17"), ("-arch", "sm_80", "--std=c++17"),
                    ("--gpu-architecture", "compute_80")):
        assert entry_verdicts(compile_ptx(with_pdl(KERNELS), options, 90))["top"].waits, options


def test_a_module_that_does_not_compile_gives_the_compiler_log():
    with pytest.raises(RuntimeError, match="undefined_name"):
        compile_ptx('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }', (), 90)


@pytest.mark.parametrize("ptx, waits", [
    (".entry k(\n.param .u64 p)\n{\n.reg .b32 %r<3>;\nld.param.u64 %rd1, [p];\nmov.u32 %r1, %tid.x;\n"
     "griddepcontrol.wait;\nst.global.u32 [%rd1], %r1;\nret;\n}", True),
    (".entry k(\n.param .u64 p)\n{\n@%p1 griddepcontrol.wait;\nret;\n}", False),
    (".entry k(\n.param .u64 p)\n{\n$L__BB0_1:\ngriddepcontrol.wait;\n// ld.global.u32 in a comment\nret;\n}", True),
    (".entry k(\n.param .u64 p)\n{\natom.global.add.u32 %r1, [%rd1], 1;\ngriddepcontrol.wait;\n}", False),
    (".entry k(\n.param .u64 p)\n{\ncp.async.ca.shared.global [%r1], [%rd1], 4;\ngriddepcontrol.wait;\n}", False),
    (".entry k(\n.param .u64 p)\n{\nld.u32 %r1, [%rd1];\ngriddepcontrol.wait;\n}", False),
])
def test_the_scan_on_handwritten_ptx(ptx: str, waits: bool):
    assert entry_verdicts(ptx)["k"].waits is waits


@pytest.mark.parametrize("source, options, could", [
    ('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }', (), False),
    ('__global__ void k() { asm volatile("griddepcontrol.wait;"); }', (), True),
    ('__global__ void k() { asm volatile("grid" "depcontrol.wait;"); }', (), True),  # split literals
    ('__global__ void k() { __asm__("nop;"); }', (), True),
    ('__global__ void k() { cudaGridDependencySynchronize(); }', (), True),
    ('__global__ void k() { __nvvm_griddepcontrol_wait(); }', (), True),
    ('#include "pdl.cuh"\n__global__ void k() { CUPYGRAPH_PDL_WAIT(); }', (), True),
    ('# include <waits.h>\n__global__ void k() {}', (), True),
    ('__global__ void k() { WAIT; }', ('-DWAIT=asm volatile("griddepcontrol.wait;")',), True),
    ('__global__ void k() {}', ("-include", "waits.h"), True),
    ('__global__ void k() {}', ("--pre-include=waits.h",), True),
    ('__global__ void k() {}', ("-I/usr/include", "--std=c++17", "-DN=4"), False),
])
def test_only_a_source_that_cannot_reach_the_wait_is_said_not_to_wait_without_a_compile(source, options, could):
    assert may_wait(source, options) is could


def test_the_scan_compiles_with_the_flags_cupy_adds_and_still_finds_the_wait():
    options = cupy_compile_options(("--std=c++17",))
    assert "--std=c++17" in options
    assert {"-ftz=true", "--device-as-default-execution-space"} <= set(options)
    assert entry_verdicts(compile_ptx(with_pdl(KERNELS), options, 90))["top"].waits


def test_a_scanned_verdict_and_an_unreadable_body():
    assert entry_verdicts(".entry k(\n.param .u64 p)\n{\ngriddepcontrol.wait;\nret;\n}")["k"].scanned
    unreadable = entry_verdicts(".entry k(\n.param .u64 p)\n{\ngriddepcontrol.wait;\n")["k"]
    assert not unreadable.waits and not unreadable.scanned
