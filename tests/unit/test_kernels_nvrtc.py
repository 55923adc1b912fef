"""Every shipped .cu source compiles with NVRTC for sm_90 (NVRTC needs no GPU)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest
from extras import PROMISED, missing

from cupygraph.kernels import SOURCES, kernel_source

# NVIDIA publishes cuda-bindings and the NVRTC wheels for these platforms only (setup.cfg's `cuda`
# extra carries the same markers). There a missing install skips naming the extra, and fails where the
# run installed it (make test, which CI runs): the compile check must not vanish from CI quietly.
CUDA_WHEEL_PLATFORMS = ("linux", "win32")


def load_nvrtc(platform: str = sys.platform) -> ModuleType:
    try:
        return importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as err:
        if platform in CUDA_WHEEL_PLATFORMS:
            missing("the NVRTC compile check of the shipped .cu sources needs cuda-bindings and nvidia-cuda-nvrtc",
                    ("cuda",), err)
        pytest.skip(f"no NVRTC here: NVIDIA publishes cuda-bindings and nvidia-cuda-nvrtc wheels for Linux "
                    f"and Windows only, not for {platform}", allow_module_level=True)
        raise  # unreachable: skip raises


nvrtc = load_nvrtc()


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


def test_pdl_header_compiles_for_sm90_alone_twice_and_with_a_kernel() -> None:
    from cupygraph import pdl_header, with_pdl

    kernel = 'extern "C" __global__ void k(float* y) { CUPYGRAPH_PDL_TRIGGER(); CUPYGRAPH_PDL_WAIT(); y[0] = 1.0f; }'
    assert compile_for_sm90("pdl.cuh", pdl_header()) > 0
    assert compile_for_sm90("kernel.cu", with_pdl(kernel)) > 0
    assert compile_for_sm90("twice.cu", with_pdl(with_pdl(kernel))) > 0


def test_broken_source_is_reported() -> None:
    with pytest.raises(AssertionError, match="NVRTC failed"):
        compile_for_sm90("broken.cu", 'extern "C" __global__ void k(float* x) { x[0] = undefined_name; }')


def test_every_cu_file_is_listed() -> None:
    from importlib import resources

    shipped = sorted(p.name for p in resources.files("cupygraph.kernels").iterdir() if p.name.endswith(".cu"))
    assert shipped == sorted(SOURCES)


def test_a_missing_nvrtc_skips_naming_the_extra_and_fails_where_the_run_installed_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)  # makes the import fail
    monkeypatch.setenv(PROMISED, "test,lint,cuda")
    with pytest.raises(ImportError, match=r"cupygraph\[cuda\].*this run installed that extra"):
        load_nvrtc("linux")
    monkeypatch.setenv(PROMISED, "test,lint")
    with pytest.raises(pytest.skip.Exception, match=r"from the cuda extra \(pip install 'cupygraph\[cuda\]'\)"):
        load_nvrtc("linux")
    with pytest.raises(pytest.skip.Exception, match="not for darwin"):
        load_nvrtc("darwin")
