"""Flatten and rebuild function outputs: an array, or a tuple/list/dict of them (nested)."""

from __future__ import annotations

from typing import Any, Callable


def flatten(tree: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """Leaves in order and a spec that ``unflatten`` rebuilds the same structure from."""
    leaves: list[Any] = []

    def walk(node: Any) -> Any:
        if isinstance(node, (tuple, list)) and not is_leaf(node):
            return (type(node), [walk(child) for child in node])
        if isinstance(node, dict):
            keys = list(node)
            return (dict, keys, [walk(node[k]) for k in keys])
        leaves.append(node)
        return None

    return leaves, walk(tree)


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    iterator = iter(leaves)

    def build(node: Any) -> Any:
        if node is None:
            return next(iterator)
        if node[0] is dict:
            return {k: build(child) for k, child in zip(node[1], node[2])}
        return node[0](build(child) for child in node[1])

    return build(spec)
