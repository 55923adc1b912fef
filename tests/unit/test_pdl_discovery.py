"""PDL for kernels built with CuPy's own classes (issue 30): a graph's kernel placed back to the
``cupy.RawKernel`` / ``RawModule`` / ``ElementwiseKernel`` that loaded its module, then scanned.

CuPy's objects are stood in for by fakes with the same attributes (``code``, ``options``, ``name``,
``kernel.module.ptr``, ``__getstate__``, ``get_function``, ``_elementwise_kernel_memo``); the scan is
real: each source is compiled for compute_90 with NVRTC, which needs no GPU. The real objects, a
captured graph and its replays are covered by tests/gpu/test_pdl.py.
"""

from __future__ import annotations

import dataclasses
import string
from importlib import resources
from typing import Any, Optional

import pdl_chain_sources as chain
import pytest
from extras import needs_nvrtc

from cupygraph.backends.pdl import discovery, modules
from cupygraph.backends.pdl.discovery import NOT_FOUND, KernelFinder, may_define
from cupygraph.backends.pdl.modules import compile_ptx
from cupygraph.backends.pdl.ptx_scan import entry_verdicts

needs_nvrtc("the scan of kernels found behind a graph")

BODY = "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i] + 1.0f;"
SIGNATURE = "(const float* x, float* y, int n)"
# The chain kernel: inline PTX, no cupygraph macro, no header.
WAITING = (f'extern "C" __global__ void step{SIGNATURE} {{\n'
           f'    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n'
           f'    asm volatile("griddepcontrol.wait;" ::: "memory");\n    {BODY}\n}}\n')
PLAIN = f'extern "C" __global__ void step{SIGNATURE} {{ {BODY} }}\n'
# The shipped header included by path, as a user compiling with plain cupy.RawModule would.
INCLUDED = (f'#include "pdl.cuh"\nextern "C" __global__ void step{SIGNATURE} {{\n'
            f'    CUPYGRAPH_PDL_TRIGGER();\n    CUPYGRAPH_PDL_WAIT();\n    {BODY}\n}}\n')
KERNELS_DIR = str(resources.files("cupygraph.kernels"))
LIVE_KERNEL_OBJECTS = discovery.live_kernel_objects


@dataclasses.dataclass(eq=False)
class Module:
    """CuPy's loaded module: its CUmodule handle."""

    ptr: int


@dataclasses.dataclass(eq=False)
class Function:
    module: Module


class RawKernel:
    """``cupy.RawKernel``: read-only source attributes, the rest in ``__getstate__``, a per-device module."""

    def __init__(self, code: Optional[str], name: str, options: tuple[str, ...] = (), *, handle: int,
                 backend: str = "nvrtc", file_path: Optional[str] = None, jitify: bool = False,
                 translate_cucomplex: bool = False, name_expressions: Optional[tuple[str, ...]] = None):
        self.code, self.name, self.options, self.backend, self.file_path = code, name, options, backend, file_path
        self._state = dict(code=code, name=name, options=options, backend=backend, file_path=file_path,
                           jitify=jitify, translate_cucomplex=translate_cucomplex, name_expressions=name_expressions,
                           enable_cooperative_groups=False, raw_ver=2)
        self._module = Module(handle)
        self.compiled = 0

    @property
    def kernel(self) -> Function:
        self.compiled += 1  # CuPy compiles here on a device it was not compiled for yet
        return Function(self._module)

    def __getstate__(self) -> dict:
        return dict(self._state)


class RawModule:
    def __init__(self, code: Optional[str], options: tuple[str, ...] = (), *, handle: int, names: tuple[str, ...]):
        self.code, self.options, self._handle, self._names = code, options, handle, names
        self.asked: list[str] = []

    @property
    def module(self) -> Module:
        return Module(self._handle)

    def get_function(self, name: str) -> RawKernel:
        self.asked.append(name)
        if name not in self._names:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: {name}")
        return RawKernel(self.code, name, self.options, handle=self._handle, file_path=None if self.code else "m.cubin")


class ElementwiseKernel:
    def __init__(self, name: str, memo: dict[Any, Function]):
        self.name, self._elementwise_kernel_memo = name, memo


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with empty module registries (put back afterwards), the fakes as CuPy's types,
    and no live objects but those a test lists (``live``): fakes other tests left behind stay out."""
    for name, value in (("_known", {}), ("_registered", []), ("_by_handle", {}), ("_resolved", {})):
        monkeypatch.setattr(modules, name, value)
    monkeypatch.setattr(discovery, "_unplaced", {})
    monkeypatch.setattr(discovery, "kernel_types", lambda: (RawKernel, RawModule, ElementwiseKernel))
    monkeypatch.setattr(discovery, "live_kernel_objects", lambda: [])


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch):
    """Stand in for the walk over every live object: returns the list it walks and counts the walks."""
    objects: list[Any] = []
    walks: list[int] = []

    def walk() -> list[Any]:
        walks.append(1)
        return list(objects)

    monkeypatch.setattr(discovery, "live_kernel_objects", walk)
    return objects, walks


def verdict_of(found: Optional[modules.KnownModule], name: str = "step") -> Any:
    assert found is not None
    return found.verdict(name, 90)


# -- placing a kernel ------------------------------------------------------------------------------


@pytest.mark.parametrize("source, options", [(WAITING, ()), (INCLUDED, (f"-I{KERNELS_DIR}",))])
def test_a_plain_rawkernel_that_waits_is_found_by_its_module_and_scanned_as_waiting(source, options):
    kernel = RawKernel(source, "step", options, handle=11)
    verdict = verdict_of(KernelFinder(0, lambda: [kernel]).find(11, "step"))
    assert verdict.waits and verdict.scanned, verdict.reason


def test_the_same_kernel_without_the_wait_is_scanned_and_does_not_wait(monkeypatch):
    def no_compile(*args: Any) -> str:
        raise AssertionError("a source without assembly, include or wait function needs no compile")

    monkeypatch.setattr(modules, "compile_ptx", no_compile)
    verdict = verdict_of(KernelFinder(0, lambda: [RawKernel(PLAIN, "step", handle=11)]).find(11, "step"))
    assert not verdict.waits and verdict.scanned
    assert "no griddepcontrol.wait" in verdict.reason


def test_a_kernel_of_the_same_name_in_another_module_is_never_taken_for_it():
    other = RawKernel(WAITING, "step", handle=12)  # waits, same name, but CuPy loaded it as another module
    assert KernelFinder(0, lambda: [other]).find(11, "step") is None


def test_a_rawmodule_gives_the_kernel_of_the_node_and_only_modules_that_could_define_it_are_asked(live):
    objects, _ = live
    unrelated = RawModule('extern "C" __global__ void other(float* y) { y[0] = 1.0f; }', handle=13, names=("other",))
    module = RawModule(WAITING, handle=11, names=("step",))
    objects.extend([unrelated, module])
    verdict = verdict_of(KernelFinder(0, lambda: ()).find(11, "step"))
    assert verdict.waits
    assert unrelated.asked == [] and module.asked == ["step"]


def test_a_mangled_template_kernel_from_name_expressions_is_found():
    source = ('template<typename T> __global__ void step(const T* x, T* y, int n) {\n'
              '    asm volatile("griddepcontrol.wait;" ::: "memory");\n    ' + BODY + '\n}\n')
    (mangled,) = entry_verdicts(compile_ptx(source, (), 90, ("step<float>",)))  # as NVRTC lowers it
    assert mangled.startswith("_Z") and may_define(source, mangled)
    kernel = RawKernel(source, mangled, handle=11, name_expressions=("step<float>",))
    found = KernelFinder(0, lambda: [kernel]).find(11, mangled)
    assert found is not None and found.name_expressions == ("step<float>",)
    assert found.verdict(mangled, 90).waits


def test_what_the_function_reaches_is_asked_first_and_every_live_object_once_per_miss(live):
    objects, walks = live
    objects.append(RawKernel(WAITING, "step", handle=11))
    assert KernelFinder(0, lambda: ()).find(11, "step") is not None  # found among the live objects
    assert walks == [1]
    search = KernelFinder(0, lambda: ())
    assert search.find(21, "lost") is None and search.find(22, "lost") is None
    assert walks == [1, 1]  # one walk per capture, however many kernels it misses
    assert KernelFinder(0, lambda: ()).find(21, "lost") is None
    assert walks == [1, 1]  # a kernel no live object held is not searched for again...
    reached = RawKernel(PLAIN, "lost", handle=21)
    assert KernelFinder(0, lambda: [reached]).find(21, "lost") is not None  # ...but what a function reaches is


def test_a_failing_walk_or_object_does_not_stop_the_search(live):
    objects, _ = live

    class Broken(RawKernel):
        @property
        def kernel(self) -> Function:
            raise RuntimeError("does not compile on this device")

    def walk() -> list[Any]:
        raise RecursionError("deep")

    objects.extend([Broken(PLAIN, "step", handle=11), RawKernel(PLAIN, "step", handle=11)])
    assert KernelFinder(0, walk).find(11, "step") is not None


def test_the_live_objects_are_every_tracked_object_of_cupys_kernel_types(monkeypatch):
    class OnlyHere(RawKernel):
        pass

    monkeypatch.setattr(discovery, "live_kernel_objects", LIVE_KERNEL_OBJECTS)
    monkeypatch.setattr(discovery, "kernel_types", lambda: (OnlyHere,))
    held = [OnlyHere(PLAIN, "step", handle=11), OnlyHere(PLAIN, "step", handle=12)]
    decoy = RawKernel(PLAIN, "step", handle=11)
    found = discovery.live_kernel_objects()
    assert sorted(map(id, found)) == sorted(map(id, held)) and all(obj is not decoy for obj in found)
    monkeypatch.setattr(discovery, "kernel_types", lambda: ())
    assert discovery.live_kernel_objects() == []  # without CuPy, nothing to walk


def test_a_found_module_is_remembered_by_handle_and_held():
    kernel = RawKernel(WAITING, "step", handle=11)
    found = KernelFinder(0, lambda: [kernel]).find(11, "step")
    assert modules.known_module(11, 0) is found
    assert [module.ptr for module in found.loaded] == [11]  # held: the handle cannot be reused meanwhile


@pytest.mark.parametrize("settings, why", [
    (dict(code=None, file_path="kernels.cubin"), "loaded from a file"),
    (dict(backend="nvcc"), "backend='nvcc'"),
    (dict(jitify=True), "jitify"),
    (dict(translate_cucomplex=True), "translate_cucomplex"),
])
def test_a_kernel_whose_compile_cannot_be_repeated_is_found_but_not_scanned(settings, why):
    kernel = RawKernel(settings.pop("code", WAITING), "step", handle=11, **settings)
    verdict = verdict_of(KernelFinder(0, lambda: [kernel]).find(11, "step"))
    assert not verdict.waits and not verdict.scanned
    assert why in verdict.reason


def test_a_rawmodule_loaded_from_a_file_is_found_but_not_scanned():
    verdict = verdict_of(KernelFinder(0, lambda: [RawModule(None, handle=11, names=("step",))]).find(11, "step"))
    assert not verdict.scanned and "loaded from a file" in verdict.reason


def test_a_source_nvrtc_refuses_or_without_the_entry_is_not_scanned():
    broken = RawKernel('extern "C" __global__ void step(float* y) { asm(""); y[0] = undefined_name; }', "step",
                       handle=11)
    verdict = verdict_of(KernelFinder(0, lambda: [broken]).find(11, "step"))
    assert not verdict.scanned and "NVRTC could not compile" in verdict.reason
    found = KernelFinder(0, lambda: [RawKernel(WAITING, "step", handle=12)]).find(12, "step")
    assert found is not None
    missing = found.verdict("not_there", 90)
    assert not missing.scanned and "no entry named 'not_there'" in missing.reason


# What CuPy's generator writes for a 1-D float32 ElementwiseKernel, in small: its loop_prep goes
# first, before the loop over the indexer.
ELEMENTWISE = string.Template(r'''
#define CUPY_FOR(i, n) for (ptrdiff_t i = ptrdiff_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
                            i += ptrdiff_t(blockDim.x) * gridDim.x)
template <int ndim> struct CIndexer {
    ptrdiff_t size_, shape_[ndim], index_[ndim];
    __device__ ptrdiff_t size() const { return size_; }
    __device__ void set(ptrdiff_t i) { index_[0] = i; }
    __device__ const ptrdiff_t* get() const { return index_; }
};
template <typename T, int ndim> struct CArray {
    T* data_; ptrdiff_t size_, shape_[ndim], strides_[ndim];
    __device__ T& operator[](const ptrdiff_t* idx) const { return data_[idx[0]]; }
};
extern "C" __global__ void chain_ew(const CArray<float, 1> _raw_x, CArray<float, 1> _raw_y, CIndexer<1> _ind) {
  ${loop_prep};
  #pragma unroll 1
  CUPY_FOR(i, _ind.size()) {
    _ind.set(i);
    const float &x = _raw_x[_ind.get()];
    float &y = _raw_y[_ind.get()];
    y = x * 0.999f + 0.5f;
  }
  ;
}
''')


@pytest.mark.parametrize("loop_prep, waits", [(chain.LOOP_PREP, True), ("", False)], ids=["waits", "plain"])
def test_an_elementwise_kernel_is_found_through_its_compiled_specialisations(monkeypatch, loop_prep, waits):
    asked: list[Any] = []

    def generated(kernel: Any, key: Any) -> tuple[str, str, tuple[str, ...]]:
        asked.append(key)
        return "// CuPy's headers\n", ELEMENTWISE.substitute(loop_prep=loop_prep), ()

    monkeypatch.setattr(discovery, "elementwise_source", generated)
    other_key, key = (0, ("float64",), "map"), (0, ("float32",), "map")
    kernel = ElementwiseKernel("chain_ew", {other_key: Function(Module(12)), key: Function(Module(11))})
    found = KernelFinder(0, lambda: [kernel]).find(11, "chain_ew")
    assert asked == [key]  # the specialisation whose module is the node's
    assert found is not None and found.prefix == "// CuPy's headers\n"
    verdict = found.verdict("chain_ew", 90)
    assert verdict.waits is waits and verdict.scanned, verdict.reason
    assert KernelFinder(0, lambda: [kernel]).find(11, "other_name") is None


@pytest.mark.parametrize("source, options, waits", [
    (chain.WAITING, (), True), (chain.HEADER, chain.HEADER_OPTIONS, True), (chain.PLAIN, (), False),
], ids=["inline_ptx", "header", "plain"])
def test_the_gpu_tests_chain_kernels_scan_as_those_tests_expect(source, options, waits):
    kernel = RawKernel(source, "chain_step", options, handle=11)
    verdict = verdict_of(KernelFinder(0, lambda: [kernel]).find(11, "chain_step"), "chain_step")
    assert verdict.waits is waits and verdict.scanned, verdict.reason


@pytest.mark.parametrize("code, name, could", [
    ("void step(", "step", True), ("void other(", "step", False),
    ("namespace ns { template<class T> __global__ void step(", "_ZN2ns4stepIfEEvPT_", True),
    ("void other(", "_Z4stepIfEvPT_", False), ("anything", "_Z", True),
])
def test_which_module_sources_are_asked_for_a_kernel_name(code, name, could):
    assert may_define(code, name) is could


def test_not_found_says_not_scanned():
    assert NOT_FOUND.startswith("not scanned")


def test_the_live_object_search_never_asks_an_objects_class(monkeypatch):
    """Some objects compute ``__class__`` (torch's deprecated module attributes warn when touched):
    the search over every live object goes by ``type()`` only, and still finds the kernel objects."""
    import warnings

    class Kernel:
        pass

    class Touchy:
        @property
        def __class__(self):  # what isinstance() would ask after its type check fails
            warnings.warn("touched", FutureWarning, stacklevel=2)
            return Touchy

    kernel, touchy = Kernel(), Touchy()
    kernel.held, touchy.held = [], []  # (objects holding containers: the garbage collector tracks them)
    monkeypatch.setattr(discovery, "live_kernel_objects", LIVE_KERNEL_OBJECTS)  # (the fixture's is a stand-in)
    monkeypatch.setattr(discovery, "kernel_types", lambda: (Kernel,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = discovery.live_kernel_objects()
    assert any(obj is kernel for obj in found) and not any(obj is touchy for obj in found)
