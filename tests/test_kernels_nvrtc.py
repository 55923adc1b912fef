"""Every shipped .cu source compiles with NVRTC for sm_90 (NVRTC needs no GPU)."""

from __future__ import annotations

import pytest

from cupygraph.kernels import SOURCES, kernel_source

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (test extra) is needed for the NVRTC check")


def _check(result: tuple, prog: object = None) -> object:
    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = ""
        if prog is not None:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.decode(errors="replace")
        raise AssertionError(f"NVRTC failed: {err}\n{log}")
    return rest[0] if rest else None


def compile_for_sm90(name: str, source: str) -> int:
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        _check(nvrtc.nvrtcCompileProgram(prog, 2, [b"--gpu-architecture=sm_90", b"--std=c++17"]), prog)
        return int(_check(nvrtc.nvrtcGetCUBINSize(prog)))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("name", SOURCES)
def test_kernel_source_compiles_for_sm90(name: str) -> None:
    assert compile_for_sm90(name, kernel_source(name)) > 0


def test_broken_source_is_reported() -> None:
    with pytest.raises(AssertionError, match="NVRTC failed"):
        compile_for_sm90("broken.cu", 'extern "C" __global__ void k(float* x) { x[0] = undefined_name; }')


def test_every_cu_file_is_listed() -> None:
    from importlib import resources

    shipped = sorted(p.name for p in resources.files("cupygraph.kernels").iterdir() if p.name.endswith(".cu"))
    assert shipped == sorted(SOURCES)
