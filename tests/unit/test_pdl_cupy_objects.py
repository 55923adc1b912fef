"""PDL's reading of real CuPy kernel objects, without a GPU (issue 30).

CuPy imports and builds its kernel objects without a GPU, and CuPy's ElementwiseKernel code
generator runs on the host: so what ``discovery`` reads from CuPy (RawKernel's state, the
ElementwiseKernel source of a specialisation behind CuPy's headers, CuPy's compile options, its own
kernels among the live objects) is checked here against the CuPy that is installed. Only the
module handle, which needs a GPU, is stood in for. Skips (naming the extra) where CuPy is not
installed; tests/gpu/test_pdl_cupy_kernels.py runs the same kernels in graphs.
"""

from __future__ import annotations

import numpy as np
import pdl_chain_sources as chain
import pytest
from extras import GPU_EXTRAS, need, needs_nvrtc

from cupygraph.backends.pdl import discovery, modules
from cupygraph.backends.pdl.discovery import KernelFinder, kernel_types

cupy = need("cupy", *GPU_EXTRAS, what="reading CuPy's own kernel objects")
needs_nvrtc("the scan of CuPy's generated kernels")
from cupy._core import _carray, _kernel  # noqa: E402

F32 = np.dtype("float32")


class Module:
    def __init__(self, ptr: int):
        self.ptr = ptr


class Function:
    def __init__(self, module: Module):
        self.module = module


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("_known", {}), ("_registered", []), ("_by_handle", {}), ("_resolved", {})):
        monkeypatch.setattr(modules, name, value)
    monkeypatch.setattr(discovery, "_unplaced", {})


def specialisation(arrays: int, *, scalar: bool = False, pairs: tuple = ()) -> tuple:
    """The key CuPy files a 1-D float32 specialisation under in ``_elementwise_kernel_memo``."""
    ndarray, indexer, scalar_kind = 1, 2, 3  # CuPy's _ArgKind values
    infos = [_kernel._ArgInfo(scalar_kind, cupy._core._scalar.CScalar, F32, 0, True, True)] if scalar else []
    infos += [_kernel._ArgInfo(ndarray, cupy.ndarray, F32, 1, True, True) for _ in range(arrays)]
    infos.append(_kernel._ArgInfo(indexer, _carray.Indexer, None, 1, True, True))
    return (0, tuple(infos), _kernel._TypeMap(pairs))


def test_cupys_kernel_classes_are_the_ones_looked_for():
    assert set(kernel_types()) == {cupy.RawKernel, cupy.RawModule, cupy.ElementwiseKernel}


def test_a_rawkernel_says_everything_its_module_was_compiled_with():
    state = cupy.RawKernel(chain.WAITING, "chain_step", options=("-DX",)).__getstate__()
    assert state["code"] == chain.WAITING and state["options"] == ("-DX",)
    # what discovery reads to tell whether the scan can repeat the compile
    assert {"file_path", "backend", "jitify", "translate_cucomplex", "name_expressions"} <= set(state)
    assert state["file_path"] is None and state["backend"] == "nvrtc"


def test_the_scan_compiles_with_cupys_own_options():
    options = modules.cupy_compile_options(("-DX",))
    assert "-DX" in options and "--std=c++17" in options
    assert any(option.startswith("-I") and option.rstrip("/").endswith("include") for option in options)


@pytest.mark.parametrize("loop_prep, waits", [(chain.LOOP_PREP, True), ("", False)], ids=["waits", "plain"])
def test_an_elementwise_kernel_is_scanned_in_the_code_cupy_generates_for_it(loop_prep, waits):
    kernel = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 0.999f + 0.5f", "chain_ew", loop_prep=loop_prep)
    key = specialisation(2)
    kernel._elementwise_kernel_memo[key] = Function(Module(11))  # as CuPy's first launch on device 0 files it
    found = KernelFinder(0, lambda: [kernel]).find(11, "chain_ew")
    assert found is not None and "#include <cupy/carray.cuh>" in found.prefix
    assert "_ind.size()" in found.source  # CuPy's loop, after the loop_prep
    verdict = found.verdict("chain_ew", 90)
    assert verdict.waits is waits and verdict.scanned, verdict.reason


def test_cupys_own_fill_kernel_is_found_among_the_live_objects_and_does_not_wait():
    fills = [obj for obj in discovery.live_kernel_objects() if getattr(obj, "name", "") == "cupy_fill"]
    assert fills, "CuPy's fill kernel (ndarray.fill) was not among the live objects"
    fill = fills[0]
    key = specialisation(1, scalar=True, pairs=(("T", F32),))
    fill._elementwise_kernel_memo[key] = Function(Module(13))
    try:
        found = KernelFinder(0, lambda: ()).find(13, "cupy_fill")
    finally:
        del fill._elementwise_kernel_memo[key]
    assert found is not None
    verdict = found.verdict("cupy_fill", 90)
    assert not verdict.waits and verdict.scanned
