"""What one graph serves: the padded batch, the runtime mode, and the call's typed signature.

A ``Signature`` holds everything about a call besides its batch size that changes the recorded
work, one typed part per argument (built in one place: ``arguments.ArgumentRules.classify``).
Two calls share a graph exactly when their ``GraphKey`` values are equal; explanations of a new
key (``explain.explain_new_key``) read the same parts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Union

import numpy as np

from ..config.model import CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape))


class _NaN:
    """Every NaN of one type, as a part of a key: NaN never equals itself, and a key must."""

    __slots__ = ("type",)

    def __init__(self, kind: type):
        self.type = kind

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NaN) and other.type is self.type

    def __hash__(self) -> int:
        return hash((_NaN, self.type))


class _Rebuilt:
    """A value as ``keyable`` rebuilt it: its type and the parts that tell it apart. Not a tuple: a NumPy
    scalar compared with a tuple broadcasts instead of answering."""

    __slots__ = ("parts", "type")

    def __init__(self, kind: type, parts: Any):
        self.type, self.parts = kind, parts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rebuilt) and other.type is self.type and bool(other.parts == self.parts)

    def __hash__(self) -> int:
        return hash((_Rebuilt, self.type, self.parts))


_PLAIN_ITEMS = (str, bytes, type(None))
"""Items whose equality already tells apart what traces differently: a tuple or frozenset of only
these is its own key."""


def _negative_zero(value: Any) -> bool:
    return value == 0 and math.copysign(1.0, value) < 0


def keyable(value: Any, depth: int = 0) -> Any:
    """``value`` as a static key compares it: itself where equality tells apart what traces differently,
    else a rebuild that does. A NaN (a float, NumPy float or complex part, also inside tuples and
    frozensets) becomes one marker per type whatever its payload or sign: without this a NaN key never
    finds its graph (a capture per call). A zero keeps its sign (``1 / k`` is inf or -inf), and the items
    of a tuple or frozenset keep their types: ``(2,) == (2.0,)``, yet ``x * k[0]`` is an int array with one
    and a float array with the other, so one graph must not serve both."""
    if isinstance(value, (float, np.floating)):
        if value != value:
            return _NaN(type(value))
        return _Rebuilt(type(value), "-0") if _negative_zero(value) else value
    if isinstance(value, (complex, np.complexfloating)):
        real, imag = value.real, value.imag
        if real == real and imag == imag and not _negative_zero(real) and not _negative_zero(imag):
            return value
        return _Rebuilt(type(value), (keyable(real), keyable(imag)))
    if isinstance(value, (tuple, frozenset)) and depth < 8:
        if all(type(item) in _PLAIN_ITEMS for item in value):
            return value
        parts = ((type(item), keyable(item, depth + 1)) for item in value)
        return _Rebuilt(type(value), tuple(parts) if isinstance(value, tuple) else frozenset(parts))
    return value


def compared_exactly(value: Any, depth: int = 0) -> bool:
    """Whether the compiled replay's comparison of a static value (``same_static`` in
    ``backends/fastpath/_replay_record.c``: the same type, then a float's value and zero sign, a tuple's
    items one by one, anything else by ``==``) tells ``value`` apart from every value ``keyable`` keys
    otherwise. Not for NumPy floating scalars, float or tuple subclasses and frozensets, whose ``==``
    cannot tell a zero's sign or an item's type: their calls keep to the Python path's keys."""
    kind = type(value)
    if kind is float or kind is complex:
        return True
    if kind is tuple:
        return depth < 8 and all(compared_exactly(item, depth + 1) for item in value)
    return not isinstance(value, (float, complex, np.floating, np.complexfloating, tuple, frozenset))


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


@dataclasses.dataclass(frozen=True, eq=False)
class StaticArg:
    """A hashable Python value: part of the key by type and value (1, 1.0 and True trace differently;
    NaN equals NaN: ``keyable``)."""

    type: type
    value: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", (self.type, keyable(self.value)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticArg) and self._key == other._key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key)  # type: ignore[attr-defined]

    def describe(self) -> str:
        return f"static {self.type.__name__} {self.value!r}"


@dataclasses.dataclass(frozen=True, eq=False)
class Kwargs:
    """The keyword arguments (all static), sorted by name, each with its type and value (keyed as
    ``StaticArg`` keys them)."""

    items: tuple[tuple[str, type, Any], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", tuple((name, kind, keyable(value)) for name, kind, value in self.items))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kwargs) and self._key == other._key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key)  # type: ignore[attr-defined]

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

    def describe(self) -> str:
        """Every part in words, in order (``"batched array float32[n, 64]; static int 3"``)."""
        parts = [*self.args, *(part for part in (self.kwargs, self.namespace) if part is not None)]
        return "; ".join(_in_words(part) for part in parts) or "no arguments"


def _in_words(part: Any) -> str:
    """A part's own words; a namespace a caller gave as a plain value (any hashable names a function) as itself."""
    describe = getattr(part, "describe", None)
    return str(describe()) if callable(describe) else f"namespace {part!r}"


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
