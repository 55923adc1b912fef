"""CUDA C sources shipped with cupygraph, loaded with importlib.resources and compiled lazily."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

SOURCES = ("heat.cu", "elementwise.cu", "mlp.cu", "control.cu")


def kernel_source(name: str) -> str:
    """The text of ``cupygraph/kernels/<name>``."""
    if name not in SOURCES:
        raise ValueError(f"unknown kernel source {name!r}; available: {', '.join(SOURCES)}")
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _module(name: str, device_id: int) -> Any:
    import cupy

    return cupy.RawModule(code=kernel_source(name), options=("--std=c++17",))


def get_kernel(source: str, function: str) -> Any:
    """A ``cupy.RawKernel`` for ``function`` in ``source``, compiled once per device."""
    import cupy

    return _module(source, cupy.cuda.Device().id).get_function(function)
