"""How ``jit`` reads a call's arguments: which are batched, copied whole, constant or static.

Every check of user input that ``jit`` makes lives here, so each error names the argument, its
shape and dtype, and says what to do; only whether ``pad_value`` fits the batched arguments is asked
of the graph cache, which pads them (``cache/padding.py``: ``check_pad_value``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union, cast

import numpy as np

from ..backends.base import Backend
from ..cache import ArgPart, BatchedArg, ConstArg, Kwargs, Namespace, Signature, StaticArg, WholeArg
from ..dispatch.descriptor import BatchDescriptor
from ..errors import InputMismatchError

Argnums = Union[int, Sequence[int]]


def argnums(value: Any, name: str) -> tuple[int, ...]:
    """Argument positions from an int or a sequence of ints (NumPy integers too)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        items: tuple[Any, ...] = (value,)
    elif isinstance(value, (list, tuple, range)):
        items = tuple(value)
    elif isinstance(value, np.ndarray) and value.ndim <= 1:
        items = tuple(value.reshape(-1).tolist())
    else:
        raise TypeError(
            f"{name} must be an argument position (int) or a sequence of them, got {type(value).__name__} {value!r}"
        )
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)) or item < 0:
            raise TypeError(f"{name} must hold non-negative argument positions (ints), got {item!r}")
    return tuple(int(item) for item in items)


def describe(value: Any) -> str:
    """``float32[3, 4] of type numpy.ndarray``, or the type for non-arrays."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    kind = f"{type(value).__module__}.{type(value).__name__}"
    return f"{dtype}{list(shape)} of type {kind}" if shape is not None and dtype is not None else kind


class ArraySpec:
    """Shape and dtype of an argument seen earlier (``warmup`` makes a placeholder from it)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.shape, self.dtype = tuple(shape), dtype


@dataclasses.dataclass(frozen=True)
class Positions:
    """Which arguments are batched, static and constant (every other array is copied whole)."""

    batch: tuple[int, ...]
    static: tuple[int, ...]
    constant: tuple[int, ...]

    @classmethod
    def parse(cls, batch: Argnums, static: Argnums, constant: Argnums) -> Positions:
        """Positions from ``jit``'s ``*_argnums`` options; an error names the option that is wrong."""
        positions = cls(argnums(batch, "batch_argnums"), argnums(static, "static_argnums"),
                        argnums(constant, "constant_argnums"))
        pairs = (("batch_argnums", positions.batch, "static_argnums", positions.static),
                 ("batch_argnums", positions.batch, "constant_argnums", positions.constant),
                 ("static_argnums", positions.static, "constant_argnums", positions.constant))
        for first, ones, second, others in pairs:
            clash = set(ones) & set(others)
            if clash:
                raise ValueError(f"argument {sorted(clash)[0]} is in both {first} and {second}")
        return positions

    def check_fits(self, fn: Callable[..., Any]) -> None:
        """A ValueError naming the option whose position ``fn`` has no parameter for (as ``jax.jit`` does);
        nothing for a function with ``*args`` or one whose signature Python cannot read (a ufunc)."""
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return
        if any(p.kind is p.VAR_POSITIONAL for p in parameters):
            return
        count = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)
        for label, chosen in (("batch_argnums", self.batch), ("static_argnums", self.static),
                              ("constant_argnums", self.constant)):
            beyond = [i for i in chosen if i >= count]
            if beyond:
                name = getattr(fn, "__name__", type(fn).__name__)
                takes = f"{count} positional argument{'' if count == 1 else 's'}" + (
                    f" (0 to {count - 1})" if count else "")
                raise ValueError(f"{label} holds {beyond[0]}, but {name}() takes {takes}; "
                                 f"argument positions count from 0")


class ArgumentRules:
    """The argument positions of one jitted function and the checks of each call's arguments."""

    def __init__(self, name: str, backend: Backend, positions: Positions, namespace: Optional[Namespace] = None):
        self.name = name
        self.namespace = namespace
        self.backend = backend
        self.batch, self.static, self.constant = positions.batch, positions.static, positions.constant
        self._const = frozenset(self.constant)
        self.method_of: Optional[str] = None
        """The class whose method the function is (argument 0 is then ``self``), for messages."""

    def descriptor(self, args: tuple[Any, ...], rows: int, given: Optional[Any],
                   descriptor_fn: Optional[Callable[..., Any]]) -> BatchDescriptor:
        """The call's descriptor: ``given`` (``call_with_descriptor``), ``descriptor_fn``'s, or the rows."""
        if given is None and descriptor_fn is None:
            return BatchDescriptor(rows)
        source = "call_with_descriptor" if given is not None else "descriptor_fn"
        desc = given if given is not None else cast(Callable[..., Any], descriptor_fn)(*args)
        if isinstance(desc, (int, np.integer)) and not isinstance(desc, (bool, np.bool_)):
            desc = BatchDescriptor(int(desc))
        if not isinstance(desc, BatchDescriptor):
            raise TypeError(f"{source} must give a BatchDescriptor or an int, got {type(desc).__name__}")
        if self.batch:
            if given is None and desc.num_tokens != rows:
                raise InputMismatchError(
                    f"{self.name}: descriptor_fn says num_tokens={desc.num_tokens} but the batched arguments have "
                    f"{rows} rows; return the real row count (cupygraph pads to the capture size itself)"
                )
            if desc.num_tokens < rows:
                raise InputMismatchError(
                    f"{self.name}.call_with_descriptor: the descriptor has num_tokens={desc.num_tokens} but "
                    f"the batched arguments have {rows} rows; num_tokens must be at least the number of rows"
                )
        return desc

    def classify(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[int, ...], tuple[int, ...], Signature]:
        """Check every argument; return (batched, copied-whole, signature): the one place a
        call's ``Signature`` is built."""
        backend, name = self.backend, self.name
        for i in self.batch + self.constant:
            if i >= len(args):
                raise TypeError(
                    f"{name}() got {len(args)} positional arguments but argument {i} is declared "
                    f"in batch_argnums/constant_argnums"
                )
        whole: list[int] = []
        signature: list[ArgPart] = []
        for i, arg in enumerate(args):
            if backend.is_array(arg):
                self._check_array(i, arg)
                if i in self._const:
                    signature.append(ConstArg(backend.address(arg), arg.shape, arg.dtype, arg.strides))
                elif i in self.batch:
                    signature.append(BatchedArg(arg.shape[1:], arg.dtype))
                else:
                    whole.append(i)
                    signature.append(WholeArg(arg.shape, arg.dtype))
            elif i in self.batch:
                what = (f"a NumPy scalar {type(arg).__module__}.{type(arg).__name__}" if isinstance(arg, np.generic)
                        else describe(arg))
                if i == 0 and self.method_of is not None:
                    raise InputMismatchError(
                        f"argument 0 of {name}() is self ({what}): {name} is a method of {self.method_of}, so its "
                        f"arguments count from self, as in jax.jit; give the positions of the arrays from there, "
                        f"e.g. @cupygraph.jit(batch_argnums=1) for def {name}(self, x)"
                    )
                raise InputMismatchError(
                    f"argument {i} of {name}() is in batch_argnums but is {what} ({arg!r:.40}), not an array "
                    f"with a leading batch axis; pass an array (np.asarray(value)[None] for one row) or leave "
                    f"it out of batch_argnums"
                )
            elif isinstance(arg, np.generic):
                signature.append(StaticArg(type(arg), arg))
            elif hasattr(arg, "__array_interface__") or hasattr(arg, "__cuda_array_interface__"):
                array_type = backend.array_type
                raise InputMismatchError(
                    f"argument {i} of {name}() is {describe(arg)}, but this function's graphs use "
                    f"{backend.name} arrays ({array_type.__module__}.{array_type.__name__}); convert "
                    f"it, or choose backend='host' for NumPy"
                )
            else:
                try:
                    hash(arg)
                except TypeError:
                    advice = (f": for self, give {type(arg).__name__} a __hash__ (__hash__ = object.__hash__ keys "
                              f"each instance by identity)" if i == 0 and self.method_of is not None else "")
                    raise InputMismatchError(
                        f"argument {i} of {name}() is an unhashable {type(arg).__name__}; non-array "
                        f"arguments are static (part of the graph key) and must be hashable{advice}"
                    ) from None
                signature.append(StaticArg(type(arg), arg))
        for key, value in kwargs.items():
            try:
                hash(value)
            except TypeError:
                raise InputMismatchError(
                    f"keyword argument {key!r} of {name}() is an unhashable {type(value).__name__}; "
                    f"keyword arguments are static (part of the graph key); pass arrays positionally"
                ) from None
        keywords = Kwargs(tuple(sorted((k, type(v), v) for k, v in kwargs.items()))) if kwargs else None
        return self.batch, tuple(whole), Signature(tuple(signature), keywords, self.namespace)

    def _check_array(self, i: int, arg: Any) -> None:
        name, backend = self.name, self.backend
        if i in self.static:
            raise InputMismatchError(
                f"argument {i} of {name}() is an array but is in static_argnums; static "
                f"arguments are hashable Python values (use constant_argnums for weights)"
            )
        if isinstance(arg, np.ma.MaskedArray):
            raise InputMismatchError(
                f"argument {i} of {name}() is a NumPy masked array ({describe(arg)}); a graph copies only its "
                f"data and would drop the mask: pass arr.filled(value), or the data and the mask as two arrays"
            )
        array_type = backend.array_type
        if type(arg) is not array_type:
            kind, plain = type(arg), f"{array_type.__module__}.{array_type.__name__}"
            matrix = " (for np.matrix, * is a matrix product: write x @ y)" if isinstance(arg, np.matrix) else ""
            raise InputMismatchError(
                f"argument {i} of {name}() is a {kind.__module__}.{kind.__qualname__} ({arg.dtype}{list(arg.shape)}), "
                f"a subclass of {plain}; a graph holds plain {plain} buffers, so what the subclass changes would be "
                f"lost without a word: pass a plain array (np.asarray(x), or x.view({plain})) and write the "
                f"operations for it{matrix}, or call the function without jit"
            )
        if arg.dtype.hasobject:
            raise InputMismatchError(
                f"argument {i} of {name}() is an object array ({describe(arg)}); graph buffers hold numbers "
                f"(CuPy has no object dtype): convert it to a numeric dtype"
            )
        if i in self.batch and arg.ndim == 0:
            raise InputMismatchError(
                f"argument {i} of {name}() is a 0-d array but is in batch_argnums; "
                f"batched arguments need a leading batch axis"
            )
        device = backend.device_of(arg)
        if device != getattr(backend, "device_id", -1):
            raise InputMismatchError(
                f"argument {i} of {name}() is on device {device} but this function's graphs "
                f"live on device {getattr(backend, 'device_id', -1)}; move it or jit it per device"
            )

    def rows(self, args: tuple[Any, ...], batched: tuple[int, ...]) -> int:
        rows = None
        for i in batched:
            n = args[i].shape[0]
            if rows is None:
                rows = n
            elif n != rows:
                raise InputMismatchError(
                    f"batched arguments of {self.name}() disagree on the batch size: argument "
                    f"{batched[0]} has {rows} rows, argument {i} has {n}"
                )
        return 0 if rows is None else rows

    def warmup_sizes(self, sizes: Any, largest: Optional[int]) -> list[int]:
        """``sizes`` as ints, largest first; an error naming every size that cannot be captured."""
        items = [sizes] if isinstance(sizes, (int, np.integer)) else list(sizes)
        bad = [s for s in items if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
               or s < 1 or (largest is not None and s > largest)]
        if bad:
            limit = f"the largest capture size {largest}" if largest is not None else "the largest capture size"
            raise ValueError(
                f"{self.name}.warmup() cannot capture sizes {bad}: batch sizes are whole numbers from 1 to "
                f"{limit} (raise max_capture_size or capture_sizes to capture larger ones)"
            )
        return sorted({int(s) for s in items}, reverse=True)
