"""Flatten and rebuild function outputs: an array, or a tuple/list/dict of them (nested).

Module-level recursion on purpose: a recursive closure is a reference cycle that would keep the
leaves (device arrays) alive until the garbage collector runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def _walk(node: Any, is_leaf: Callable[[Any], bool], leaves: list[Any]) -> Any:
    if isinstance(node, (tuple, list)) and not is_leaf(node):
        return (type(node), [_walk(child, is_leaf, leaves) for child in node])
    if isinstance(node, dict):
        keys = list(node)
        return (dict, keys, [_walk(node[k], is_leaf, leaves) for k in keys])
    leaves.append(node)
    return None


def flatten(tree: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """Leaves in order and a spec that ``unflatten`` rebuilds the same structure from."""
    leaves: list[Any] = []
    spec = _walk(tree, is_leaf, leaves)
    return leaves, spec


def _build(node: Any, leaves: Iterator[Any]) -> Any:
    if node is None:
        return next(leaves)
    if node[0] is dict:
        return {k: _build(child, leaves) for k, child in zip(node[1], node[2])}
    return node[0](_build(child, leaves) for child in node[1])


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    return _build(spec, iter(leaves))
