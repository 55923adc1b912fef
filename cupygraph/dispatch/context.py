"""The forward context: which runtime mode and descriptor the current thread's call runs under.

Like vLLM's forward context, a dispatcher decides once per step and the wrappers below trust it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from ..config.model import CUDAGraphMode
from .descriptor import BatchDescriptor, check_descriptor

_local = threading.local()


@dataclasses.dataclass(frozen=True)
class ForwardContext:
    mode: CUDAGraphMode = CUDAGraphMode.NONE
    descriptor: Optional[BatchDescriptor] = None


_NO_CONTEXT = ForwardContext()


def get_forward_context() -> ForwardContext:
    """The innermost context of this thread (mode NONE outside any ``cudagraph_context``)."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _NO_CONTEXT


@contextmanager
def cudagraph_context(
    mode: CUDAGraphMode, descriptor: Optional[BatchDescriptor] = None
) -> Iterator[ForwardContext]:
    """Run the body under a runtime mode and batch descriptor, for this thread only (nestable)."""
    mode = CUDAGraphMode.parse(mode)
    if not mode.valid_runtime_modes():
        raise ValueError(f"cudagraph_context needs a runtime mode (NONE, PIECEWISE or FULL), got {mode.name}")
    if mode is not CUDAGraphMode.NONE and descriptor is None:
        raise ValueError(f"cudagraph_context(mode={mode.name}) needs the batch descriptor to capture or replay")
    if descriptor is not None:
        check_descriptor(descriptor, "descriptor")
    context = ForwardContext(mode, descriptor)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(context)
    try:
        yield context
    finally:
        stack.pop()
