"""What one graph serves: the padded batch, the runtime mode, and the call's typed signature.

A ``Signature`` holds everything about a call besides its batch size that changes the recorded
work, one typed part per argument (built in one place: ``arguments.ArgumentRules.classify``).
Two calls share a graph exactly when their ``GraphKey`` values are equal; explanations of a new
key (``explain.explain_new_key``) read the same parts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

from ..config.model import CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape))


@dataclasses.dataclass(frozen=True)
class BatchedArg:
    """An array whose leading axis is the batch: copied into a static buffer padded to the key's size."""

    trailing_shape: tuple[int, ...]
    dtype: Any

    def describe(self) -> str:
        return f"batched array {self.dtype}[n{', ' if self.trailing_shape else ''}{_dims(self.trailing_shape)}]"


@dataclasses.dataclass(frozen=True)
class WholeArg:
    """An array without a batch axis: copied whole into a static buffer of its own shape."""

    shape: tuple[int, ...]
    dtype: Any

    def describe(self) -> str:
        return f"array {self.dtype}[{_dims(self.shape)}]"


@dataclasses.dataclass(frozen=True)
class ConstArg:
    """An array declared constant (weights): captured by address, so the address is part of the key."""

    address: int
    shape: tuple[int, ...]
    dtype: Any
    strides: tuple[int, ...]

    def describe(self) -> str:
        return f"constant {self.dtype}[{_dims(self.shape)}] at {hex(self.address)}"


@dataclasses.dataclass(frozen=True)
class StaticArg:
    """A hashable Python value: part of the key by type and value (1, 1.0 and True trace differently)."""

    type: type
    value: Any

    def describe(self) -> str:
        return f"static {self.type.__name__} {self.value!r}"


@dataclasses.dataclass(frozen=True)
class Kwargs:
    """The keyword arguments (all static), sorted by name, each with its type and value."""

    items: tuple[tuple[str, type, Any], ...]

    def describe(self) -> str:
        return "keywords " + ", ".join(f"{name}={value!r}" for name, _, value in self.items)


@dataclasses.dataclass(frozen=True)
class Namespace:
    """Which function of a shared registry a key belongs to (``CUDAGraphManager`` graphs several)."""

    name: str
    ident: int

    def describe(self) -> str:
        return f"function {self.name}"


ArgPart = Union[BatchedArg, WholeArg, ConstArg, StaticArg]
"""What one positional argument contributes to a signature."""


@dataclasses.dataclass(frozen=True)
class Signature:
    """Everything about a call, besides its batch size, that changes the recorded work."""

    args: tuple[ArgPart, ...] = ()
    kwargs: Optional[Kwargs] = None
    namespace: Optional[Namespace] = None

    def constants(self) -> tuple[ConstArg, ...]:
        return tuple(part for part in self.args if isinstance(part, ConstArg))

    def without_constants(self) -> Signature:
        """This signature with the constant arguments left out (what stays when weights move)."""
        return dataclasses.replace(self, args=tuple(p for p in self.args if not isinstance(p, ConstArg)))


NO_SIGNATURE = Signature()


@dataclasses.dataclass(frozen=True)
class GraphKey:
    """What one executable graph serves: a padded batch, the runtime mode, and the call signature."""

    descriptor: BatchDescriptor
    mode: CUDAGraphMode = CUDAGraphMode.FULL
    signature: Signature = NO_SIGNATURE

    def without_constants(self) -> tuple[BatchDescriptor, CUDAGraphMode, Signature]:
        """The key with its constant arguments left out: what keys differing only in weights share."""
        return (self.descriptor, self.mode, self.signature.without_constants())
