"""Kernels that opt in to programmatic dependent launch (PDL), and how cupygraph recognises them.

A kernel opts in by executing ``griddepcontrol.wait`` (``CUPYGRAPH_PDL_WAIT()`` from ``pdl.cuh``,
or the inline PTX) before it touches memory. Whether it really does is read from the compiled
kernel, never from a flag: cupygraph knows the source and options of the module behind a graph's
kernel, compiles the same source to PTX with NVRTC as CuPy compiled it, and scans each entry
(``ptx_scan``). It knows them for every module compiled through ``pdl_module`` / ``pdl_kernel``
(and for its own kernels: registered here), and for any module a ``cupy.RawKernel``,
``cupy.RawModule`` or ``cupy.ElementwiseKernel`` loaded (found behind the graph's kernel by
``discovery``). A graph's kernel node is matched to a module by its function's module handle and
name; a kernel of a module whose source is not known (CuPy's ufuncs, libraries) is not scanned,
and edges into it stay plain.

Usage::

    step = cupygraph.pdl_kernel(r'''
    extern "C" __global__ void step(const float* x, float* y, int n) {
        CUPYGRAPH_PDL_TRIGGER();   // optional: let the next kernel launch now
        CUPYGRAPH_PDL_WAIT();      // before the first read of what earlier kernels wrote
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }''', "step")
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any, Optional

from .ptx_scan import WaitVerdict, entry_verdicts, may_wait

__all__ = [
    "HEADER", "KnownModule", "cupy_compile_options", "known_module", "pdl_header", "pdl_kernel", "pdl_module",
    "register_module", "remember", "with_pdl",
]

HEADER = "pdl.cuh"
_ARCH_OPTION = re.compile(r"^(-arch|--gpu-architecture|-gencode|--generate-code)(=|$)")


@functools.cache
def pdl_header() -> str:
    """The text of ``cupygraph/kernels/pdl.cuh``: the ``CUPYGRAPH_PDL_WAIT`` / ``_TRIGGER`` macros."""
    # shipped beside the .cu sources
    return resources.files("cupygraph.kernels").joinpath(HEADER).read_text(encoding="utf-8")


def with_pdl(code: str) -> str:
    """``code`` with the PDL macros defined ahead of it (the header has an include guard)."""
    if not isinstance(code, str):
        raise TypeError(f"with_pdl(code): code must be CUDA C source text (str), got {type(code).__name__}")
    return pdl_header() + "\n#line 1\n" + code


@dataclasses.dataclass
class KnownModule:
    """A loaded module whose source cupygraph knows: what CuPy compiled it from, and the verdict of
    each entry, per architecture. Every CuPy ``Module`` matched to it is held, so its handle is
    never unloaded and reused by another module while this process remembers it."""

    source: str
    options: tuple[str, ...]
    name_expressions: tuple[str, ...] = ()
    prefix: str = ""
    """Text CuPy put in front of ``source`` when it compiled it (its own headers, for an
    ElementwiseKernel): compiled with the source, but never the user's code."""
    refused: str = ""
    """Why the code of this module cannot be scanned ('' when it can): a module loaded from a file,
    compiled with nvcc, ..."""
    owner: Any = None
    """The registered CuPy object (``pdl_kernel``/``pdl_module``, cupygraph's kernels), asked for its
    module on each device; None for a module found behind a graph's kernel (``discovery``)."""
    verdicts: dict[int, dict[str, WaitVerdict]] = dataclasses.field(default_factory=dict)
    """Per PTX architecture (90 for compute_90): each entry's verdict."""
    loaded: list[Any] = dataclasses.field(default_factory=list)
    """CuPy's loaded ``Module`` per device looked up: held, so no other module can get its handle."""

    def module_handle(self) -> int:
        """The CUmodule of the registered owner on the current device (compiled there if it was not yet)."""
        owner = self.owner
        module = owner.module if hasattr(owner, "get_function") else owner.kernel.module
        self.loaded.append(module)
        return int(module.ptr)

    def verdict(self, name: str, arch: int) -> WaitVerdict:
        if self.refused:
            return WaitVerdict(False, self.refused, scanned=False)
        if not may_wait(self.source, self.options):
            return WaitVerdict(False, "no griddepcontrol.wait: its source has no inline assembly, include or "
                                      "wait function")
        if arch not in self.verdicts:
            try:
                ptx = compile_ptx(self.prefix + self.source, cupy_compile_options(self.options), arch,
                                  self.name_expressions)
                self.verdicts[arch] = entry_verdicts(ptx)
            except Exception as err:  # the edge stays plain; say why
                text = str(err).strip().splitlines()
                self.verdicts[arch] = {"": WaitVerdict(False, f"not scanned: NVRTC could not compile the module to "
                                                              f"PTX ({text[0] if text else type(err).__name__})",
                                                       scanned=False)}
        found = self.verdicts[arch]
        if name in found:
            return found[name]
        return found.get("", WaitVerdict(False, f"not scanned: no entry named {name!r} in the module's PTX",
                                         scanned=False))


_lock = threading.Lock()
_known: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], KnownModule] = {}
"""Every module with a known source, by (prefix, source, options, name expressions): its verdicts
are compiled once, whichever device or object it was met on."""
_registered: list[KnownModule] = []
_by_handle: dict[tuple[int, int], KnownModule] = {}
_resolved: dict[int, int] = {}
"""Per device: how many of ``_registered`` (in order) have their module handle looked up."""


def register_module(owner: Any, source: str, options: Sequence[str] = (),
                    name_expressions: Sequence[str] = ()) -> None:
    """Remember that ``owner`` (a ``cupy.RawModule`` or ``RawKernel``) was compiled from ``source``."""
    key = ("", source, tuple(options), tuple(name_expressions))
    with _lock:
        known = _known.setdefault(key, KnownModule(source, tuple(options), tuple(name_expressions)))
        if known.owner is None:
            known.owner = owner
            _registered.append(known)


def remember(device: int, handle: int, module: Any, source: str = "", options: Sequence[str] = (),
             name_expressions: Sequence[str] = (), prefix: str = "", refused: str = "") -> KnownModule:
    """Remember that CuPy's ``module``, loaded on ``device`` as CUmodule ``handle``, was compiled from
    ``prefix + source`` with ``options`` (or, with ``refused``, why its code cannot be scanned)."""
    with _lock:
        if refused:
            known = KnownModule("", (), refused=refused)
        else:
            key = (prefix, source, tuple(options), tuple(name_expressions))
            known = _known.setdefault(key, KnownModule(source, tuple(options), tuple(name_expressions), prefix))
        known.loaded.append(module)
        _by_handle[(device, int(handle))] = known
        return known


def known_module(handle: int, device: int) -> Optional[KnownModule]:
    """The module with a known source whose CUmodule on ``device`` (the current one) is ``handle``, if any.

    Modules registered since the last look-up on this device are compiled there first, if they
    were not yet: call it after a capture has ended, never during one.
    """
    with _lock:
        start = _resolved.get(device, 0)
        for module in _registered[start:]:
            try:
                _by_handle[(device, module.module_handle())] = module
            except Exception:  # a module that does not build here cannot be in the graph either
                pass
        _resolved[device] = len(_registered)
        return _by_handle.get((device, int(handle)))


def cupy_compile_options(options: Sequence[str]) -> tuple[str, ...]:
    """The options CuPy's NVRTC compile of a ``RawKernel``/``RawModule`` adds to ``options`` (its
    default C++ standard and include paths, flush-to-zero, device functions by default): the scan
    compiles what CuPy compiled. Without CuPy (on the CPU), ``options`` and those two flags."""
    try:
        from cupy._core.core import assemble_cupy_compiler_options

        assembled = tuple(assemble_cupy_compiler_options(tuple(options)))
    except Exception:  # no CuPy, or CuPy without its headers: the user's options alone
        assembled = tuple(options)
    return (*assembled, "-ftz=true", "--device-as-default-execution-space")


def pdl_module(code: str, *, options: Sequence[str] = (), name_expressions: Sequence[str] = ()) -> Any:
    """A ``cupy.RawModule`` of ``code`` with the PDL macros defined, that cupygraph can scan."""
    import cupy

    source = with_pdl(code)
    module = cupy.RawModule(code=source, options=tuple(options),
                            name_expressions=tuple(name_expressions) or None)
    register_module(module, source, options, name_expressions)
    return module


def pdl_kernel(code: str, name: str, *, options: Sequence[str] = ()) -> Any:
    """A ``cupy.RawKernel`` named ``name`` in ``code`` with the PDL macros defined (see ``pdl_module``)."""
    import cupy

    source = with_pdl(code)
    kernel = cupy.RawKernel(source, name, options=tuple(options))
    register_module(kernel, source, options)
    return kernel


def compile_ptx(source: str, options: Sequence[str], arch: int, name_expressions: Sequence[str] = ()) -> str:
    """PTX of ``source`` for ``compute_<arch>`` with the user's options (their own arch dropped)."""
    flags: list[str] = []
    skip_value = False
    for option in options:
        if skip_value:  # the value of a "-arch" given as its own item
            skip_value = False
            continue
        match = _ARCH_OPTION.match(option)
        if match is None:
            flags.append(option)
        else:
            skip_value = match.group(2) == ""
    flags.append(f"--gpu-architecture=compute_{arch}")
    try:
        return _compile_cuda_bindings(source, flags, name_expressions)
    except NvrtcError:  # NVRTC ran and refused the source: its log says why, CuPy's would not
        raise
    except Exception as err:  # no cuda-bindings, or no NVRTC library behind them: CuPy's binding
        try:
            return _compile_cupy(source, flags, name_expressions)
        except ImportError:
            raise err from None


class NvrtcError(RuntimeError):
    """NVRTC (through cuda-bindings) refused a source; the message carries its log."""


def _compile_cuda_bindings(source: str, flags: list[str], names: Sequence[str]) -> str:
    from cuda.bindings import nvrtc

    def check(result: Any, prog: Any = None) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = ""
            if prog is not None:
                size = nvrtc.nvrtcGetProgramLogSize(prog)[1]
                buf = b" " * size
                nvrtc.nvrtcGetProgramLog(prog, buf)
                log = buf.decode(errors="replace").strip()
            raise NvrtcError(f"{err}: {log}" if log else str(err))
        return rest[0] if rest else None

    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), b"pdl_scan.cu", 0, [], []))
    try:
        for name in names:
            check(nvrtc.nvrtcAddNameExpression(prog, name.encode()), prog)
        check(nvrtc.nvrtcCompileProgram(prog, len(flags), [f.encode() for f in flags]), prog)
        size = check(nvrtc.nvrtcGetPTXSize(prog))
        buf = b" " * size
        check(nvrtc.nvrtcGetPTX(prog, buf))
        return str(buf.rstrip(b"\x00").decode(errors="replace"))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _compile_cupy(source: str, flags: list[str], names: Sequence[str]) -> str:
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, "pdl_scan.cu", (), ())
    try:
        for name in names:
            nvrtc.addNameExpression(prog, name)
        nvrtc.compileProgram(prog, flags)
        return str(nvrtc.getPTX(prog).rstrip(b"\x00").decode(errors="replace"))
    finally:
        nvrtc.destroyProgram(prog)
