"""CUDA C sources shipped with cupygraph, loaded with importlib.resources and compiled lazily.

Every shipped source is given the PDL macros (``pdl.cuh``) and its kernels opt in; modules are
registered so graphs can find, in their PTX, which kernels wait (``backends/pdl/``).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from ..backends.pdl.modules import register_module, with_pdl

SOURCES = ("heat.cu", "elementwise.cu", "mlp.cu", "control.cu", "fingerprint.cu")


def kernel_source(name: str) -> str:
    """The text of ``cupygraph/kernels/<name>``, with the PDL macros defined ahead of it."""
    if name not in SOURCES:
        raise ValueError(f"unknown kernel source {name!r}; available: {', '.join(SOURCES)}")
    return with_pdl(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


@functools.cache
def _module(name: str, device_id: int) -> Any:
    import cupy

    source, options = kernel_source(name), ("--std=c++17",)
    module = cupy.RawModule(code=source, options=options)
    register_module(module, source, options)
    return module


def get_kernel(source: str, function: str) -> Any:
    """A ``cupy.RawKernel`` for ``function`` in ``source``, compiled once per device."""
    import cupy

    return _module(source, cupy.cuda.Device().id).get_function(function)
