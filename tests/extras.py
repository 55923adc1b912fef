"""Tests that need an optional extra of setup.cfg: they skip, naming the extra, where it is missing.

A run that installed the extra must not skip quietly: ``make test`` exports the extras it installed
in ``CUPYGRAPH_TEST_EXTRAS`` (comma-separated), and a test whose extra is listed there but does not
import fails instead, naming the extra (a broken install, not a missing option).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

# The GPU extras, one per CUDA major version: either one brings CuPy and nvmath-python.
GPU_EXTRAS = ("cuda13", "cuda12")
PROMISED = "CUPYGRAPH_TEST_EXTRAS"


def promised_extras() -> set[str]:
    return {name.strip() for name in os.environ.get(PROMISED, "").split(",") if name.strip()}


def missing(needs: str, extras: tuple[str, ...], err: BaseException) -> None:
    """Skip, saying what ``needs`` which extra; or fail where this run installed one of ``extras``."""
    install = " or ".join(f"pip install 'cupygraph[{extra}]'" for extra in extras)
    needs = f"{needs}, from the {'/'.join(extras)} extra ({install})"
    if promised_extras() & set(extras):
        raise ImportError(f"{needs}; this run installed that extra ({PROMISED}), so the install is broken: "
                          f"{type(err).__name__}: {err}") from err
    pytest.skip(needs, allow_module_level=True)


def need(module: str, *extras: str, what: str = "") -> ModuleType:
    """``module`` imported, for a test that needs one of ``extras``; else a skip (or, where the run
    promised one of them, a failure) that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing(f"{what or module} needs {module}", extras, err)
        raise  # unreachable: missing() skips or raises


def needs_nvmath(what: str = "cuSOLVER and cuSPARSE (cupygraph.linalg)") -> ModuleType:
    """nvmath-python, which the GPU extras install for cupygraph.linalg's cuSOLVER/cuSPARSE routes."""
    return need("nvmath.bindings", *GPU_EXTRAS, what=what)


def needs_nvrtc(what: str) -> None:
    """A working NVRTC (the cuda extra's cuda-bindings and nvidia-cuda-nvrtc, or CuPy's): a trivial
    kernel must compile, since the import alone does not load the library."""
    from cupygraph.backends.pdl.modules import compile_ptx

    try:
        compile_ptx('extern "C" __global__ void probe() {}', (), 90)
    except Exception as err:
        missing(f"{what} needs NVRTC", ("cuda",), err)
