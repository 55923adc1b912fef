"""Kernels that opt in to programmatic dependent launch (PDL), and how cupygraph recognises them.

A kernel opts in by calling ``CUPYGRAPH_PDL_WAIT()`` (``pdl.cuh``) before it touches memory.
Whether it really does is read from the compiled kernel, never from a flag: cupygraph knows the
source and options of every module compiled through ``pdl_module`` / ``pdl_kernel`` (and of its
own kernels), compiles the same source to PTX with NVRTC when a graph first holds one of its
kernels, and scans each entry (``ptx_scan``). A graph's kernel node is matched to that scan by its
function's module handle and name; a kernel compiled any other way (``cupy.RawKernel`` directly,
CuPy's own kernels, libraries) is unknown, and edges into it stay plain.

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

from .ptx_scan import WaitVerdict, entry_verdicts

__all__ = ["HEADER", "known_module", "pdl_header", "pdl_kernel", "pdl_module", "register_module", "with_pdl"]

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
    """A module compiled through cupygraph: the CuPy object (kept alive, so its module handle is
    never unloaded and reused while registered), and what it was compiled from."""

    owner: Any
    source: str
    options: tuple[str, ...]
    name_expressions: tuple[str, ...]
    verdicts: dict[int, dict[str, WaitVerdict]] = dataclasses.field(default_factory=dict)
    """Per PTX architecture (90 for compute_90): each entry's verdict."""
    loaded: list[Any] = dataclasses.field(default_factory=list)
    """CuPy's loaded ``Module`` per device looked up: held, so no other module can get its handle."""

    def module_handle(self) -> int:
        """The CUmodule of this module on the current device (compiled there if it was not yet)."""
        owner = self.owner
        module = owner.module if hasattr(owner, "get_function") else owner.kernel.module
        self.loaded.append(module)
        return int(module.ptr)

    def verdict(self, name: str, arch: int) -> WaitVerdict:
        if arch not in self.verdicts:
            try:
                ptx = compile_ptx(self.source, self.options, arch, self.name_expressions)
                self.verdicts[arch] = entry_verdicts(ptx)
            except Exception as err:  # the edge stays plain; say why
                text = str(err).strip().splitlines()
                self.verdicts[arch] = {"": WaitVerdict(False, f"NVRTC could not compile the module to PTX "
                                                              f"({text[0] if text else type(err).__name__})")}
        found = self.verdicts[arch]
        if name in found:
            return found[name]
        return found.get("", WaitVerdict(False, f"no entry named {name!r} in the module's PTX"))


_lock = threading.Lock()
_known: dict[tuple[str, tuple[str, ...], tuple[str, ...]], KnownModule] = {}
_by_handle: dict[tuple[int, int], KnownModule] = {}
_resolved: dict[int, int] = {}
"""Per device: how many of ``_known`` (in insertion order) have their module handle looked up."""


def register_module(owner: Any, source: str, options: Sequence[str] = (),
                    name_expressions: Sequence[str] = ()) -> None:
    """Remember that ``owner`` (a ``cupy.RawModule`` or ``RawKernel``) was compiled from ``source``."""
    key = (source, tuple(options), tuple(name_expressions))
    with _lock:
        _known.setdefault(key, KnownModule(owner, source, tuple(options), tuple(name_expressions)))


def known_module(handle: int, device: int) -> Optional[KnownModule]:
    """The registered module whose CUmodule on ``device`` (the current one) is ``handle``, if any.

    Modules registered since the last look-up on this device are compiled there first, if they
    were not yet: call it after a capture has ended, never during one.
    """
    with _lock:
        known = list(_known.values())
        start = _resolved.get(device, 0)
        for module in known[start:]:
            try:
                _by_handle[(device, module.module_handle())] = module
            except Exception:  # a module that does not build here cannot be in the graph either
                pass
        _resolved[device] = len(known)
        return _by_handle.get((device, int(handle)))


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
    except Exception as err:  # no cuda-bindings, or no NVRTC library behind them: CuPy's binding
        try:
            return _compile_cupy(source, flags, name_expressions)
        except ImportError:
            raise err from None


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
            raise RuntimeError(f"{err}: {log}" if log else str(err))
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
