"""Flatten and rebuild function outputs: arrays inside tuples, lists, dicts, namedtuples,
dataclass instances and None (nested).

A spec is plain, comparable data (node kinds, types, keys), so a replay can check that the
function returned the same structure. ``None`` is an empty node (no leaf), as in JAX: it comes
back as None. A namedtuple is rebuilt with its fields as positional arguments; a dataclass
instance with the same type and the same fields, without running ``__init__`` or
``__post_init__`` again (attributes that are not dataclass fields are not carried over). Every
other object is a leaf.

Module-level recursion on purpose: a recursive closure is a reference cycle that would keep the
leaves (device arrays) alive until the garbage collector runs.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from .errors import InputMismatchError

LEAF = None
"""The spec of a single leaf (the whole output is one array)."""

_EMPTY = ("none",)


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _walk(node: Any, is_leaf: Callable[[Any], bool], leaves: list[Any]) -> Any:
    if is_leaf(node):
        leaves.append(node)
        return LEAF
    if node is None:
        return _EMPTY
    if isinstance(node, (tuple, list)):
        children = tuple(_walk(child, is_leaf, leaves) for child in node)
        return ("namedtuple" if _is_namedtuple(node) else "seq", type(node), children)
    if isinstance(node, dict):
        keys = tuple(node)
        children = tuple(_walk(node[k], is_leaf, leaves) for k in keys)
        factory = node.default_factory if isinstance(node, collections.defaultdict) else None
        return ("dict", type(node), keys, children, factory)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        names = tuple(f.name for f in dataclasses.fields(node))
        children = tuple(_walk(getattr(node, name), is_leaf, leaves) for name in names)
        return ("dataclass", type(node), names, children)
    leaves.append(node)
    return LEAF


def flatten(tree: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """Leaves in order and a spec that ``unflatten`` rebuilds the same structure from."""
    leaves: list[Any] = []
    spec = _walk(tree, is_leaf, leaves)
    return leaves, spec


def _build(node: Any, leaves: Iterator[Any]) -> Any:
    if node is LEAF:
        return next(leaves)
    kind = node[0]
    if kind == "seq":
        return node[1](_build(child, leaves) for child in node[2])
    if kind == "namedtuple":
        return node[1](*[_build(child, leaves) for child in node[2]])
    if kind == "dict":
        cls, keys, children, factory = node[1], node[2], node[3], node[4]
        items = [(k, _build(child, leaves)) for k, child in zip(keys, children)]
        return cls(factory, items) if issubclass(cls, collections.defaultdict) else cls(items)
    if kind == "dataclass":
        cls, names, children = node[1], node[2], node[3]
        obj = cls.__new__(cls)
        for name, child in zip(names, children):
            object.__setattr__(obj, name, _build(child, leaves))  # frozen dataclasses too
        return obj
    return None  # _EMPTY


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    return _build(spec, iter(leaves))


def num_leaves(spec: Any) -> int:
    """How many leaves a spec holds."""
    if spec is LEAF:
        return 1
    kind = spec[0]
    if kind in ("seq", "namedtuple"):
        return sum(num_leaves(child) for child in spec[2])
    if kind == "dict":
        return sum(num_leaves(child) for child in spec[3])
    if kind == "dataclass":
        return sum(num_leaves(child) for child in spec[3])
    return 0


def expand_out_batched(out_batched: Any, outputs: Any, count: int) -> list[bool]:
    """``out_batched`` as one flag per output leaf: a bool for all, or the outputs' structure."""
    if isinstance(out_batched, bool):
        return [out_batched] * count
    flags, _ = flatten(out_batched, lambda v: isinstance(v, bool))
    if len(flags) != count or not all(isinstance(f, bool) for f in flags):
        raise InputMismatchError(
            f"out_batched must be a bool or match the outputs' structure with bools ({count} outputs), "
            f"got {out_batched!r}"
        )
    return flags


def same_value(old: Any, new: Any) -> bool:
    """Whether a non-array output is ``old`` again: same type and equal (NaN equals NaN). A graph
    returns the capture's value of such an output on every replay."""
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    try:
        if isinstance(old, float) and math.isnan(old):
            return math.isnan(new)
        return bool(old == new)
    except Exception:  # a value whose comparison fails cannot be shown to be the same
        return False
