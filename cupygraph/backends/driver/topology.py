"""The structure of a CuPy recording's real CUDA graphs (topology snapshots), from the capture's reading.

What ``diagnostics.topology`` compares: per recording, the pieces and graph breaks, and over all
their nodes (child graphs and conditional bodies included, in place): counts by node kind,
kernel function names in ``cuGraphGetNodes`` order (the order stream capture created them), the
memcpy and memset nodes (direction and bytes) and the conditional nodes (their type and bodies: a
switch's are its branches). Everything comes from the recording's graph snapshots
(``driver/snapshot.py``), read once per capture. ``with_conditional_legend`` adds the conditional
nodes to a graph's DOT text as a note (``cupygraph dot``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ...errors import CupyGraphError
from .snapshot import GraphSnapshot, Node


def describe_conditional(node: Node) -> str:
    """A conditional node in words: ``while, 1 body``, ``if, 1 body``, ``switch, 3 branches``."""
    if node.conditional is None:
        return "unreadable"
    size = len(node.children)
    if node.conditional == "switch":
        return f"switch, {size} {'branch' if size == 1 else 'branches'}"
    return f"{node.conditional}, {size} {'body' if size == 1 else 'bodies'}"


def conditional_nodes(snapshot: GraphSnapshot) -> list[str]:
    """Every conditional node of ``snapshot`` (nested ones in place after their node), in words."""
    return [describe_conditional(node) for node, _depth in snapshot.walk() if node.kind == "conditional"]


def with_conditional_legend(dot: str, conditionals: Sequence[str]) -> str:
    """``dot`` (one graph's DOT text) with a note listing its conditional nodes, last in the graph, so the
    picture gives each one's type and bodies whatever the driver's own DOT shows of them."""
    end = dot.rstrip().rfind("}")
    if not conditionals or end < 0:
        return dot
    label = "\\l".join(["conditional nodes (cupygraph):", *conditionals]) + "\\l"
    return f'{dot[:end]}"cupygraph_conditional_nodes" [shape="note" label="{label}"];\n{dot[end:]}'


def recording_topology(recording: Any) -> dict[str, Any]:
    """The description of ``recording`` (a ``CupyRecording``): plain data, kernel names one per launch."""
    kinds: Counter[str] = Counter()
    kernels: list[str] = []
    memcpy: list[str] = []
    memset: list[str] = []
    conditional: list[str] = []
    pieces, breaks = 0, []
    for step in getattr(recording, "steps", []):
        graph = getattr(step, "graph", None)
        if graph is None:  # an eager step between pieces: a graph break
            fn = getattr(step, "fn", None)
            breaks.append(getattr(fn, "__name__", type(fn).__name__))
            continue
        pieces += 1
        snapshot: GraphSnapshot = recording.snapshot_of(int(graph))
        if snapshot.problem is not None:
            raise CupyGraphError(f"cuGraphGetNodes failed on graph 0x{int(graph):x}: its topology cannot be read")
        for node, _depth in snapshot.walk():
            kinds["child_graph" if node.kind == "graph" else node.kind] += 1
            if node.kind == "kernel":
                kernel = node.kernel
                kernels.append("<unreadable kernel>" if kernel is None else kernel.name or "<unnamed kernel>")
            elif node.kind == "memcpy":
                copy = node.copy
                memcpy.append("unreadable" if copy is None else
                              f"{copy.src_kind} to {copy.dst_kind}, {copy.nbytes:,} bytes")
            elif node.kind == "memset":
                memset.append("unreadable" if node.fill is None else f"{node.fill.nbytes:,} bytes")
            elif node.kind == "conditional":
                conditional.append(describe_conditional(node))
    return {
        "pieces": pieces,
        "graph_breaks": breaks,
        "nodes_by_kind": dict(sorted(kinds.items())),
        "kernels": kernels,
        "memcpy": memcpy,
        "memset": memset,
        "conditional": conditional,
    }
