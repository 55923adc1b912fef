"""Graph topology snapshots: what each captured graph of a function holds, as readable JSON, and
the differences between two such descriptions in words.

A description is plain data per graph (keyed ``"FULL size=8"``): node counts by kind, kernel
names in launch order (run-length encoded), memcpy and memset nodes, conditional nodes, pieces
and graph breaks, and the bytes the graph holds. The GPU backend reads it from the real graph
(``backends/driver/topology.py``); everything here is pure, so it is tested on recorded
descriptions. ``diff_topologies`` says what changed ("kernel `step` now launched 33 times, was
32"; "a memcpy node appeared (device to device, 4096 bytes)"); bytes compare within a tolerance.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from ..cache import key_label
from ..errors import CupyGraphError
from .inspect import Inspectable

FORMAT = 1
"""Version of the snapshot file layout (``"cupygraph_topology"`` in the file)."""

_LISTED = ("graph_breaks", "memcpy", "memset", "conditional")
_COUNTED = ("pieces", "bytes")


class SnapshotError(CupyGraphError, ValueError):
    """A snapshot file that cannot be read as a topology snapshot; the message names the file and field."""


def graph_label(entry: Any) -> str:
    """How a graph is named in a snapshot: its runtime mode and padded size (and sequence bucket)."""
    return key_label(entry.key)


def run_lengths(names: Iterable[str]) -> list[list[Any]]:
    """``["a", "a", "b"]`` as ``[["a", 2], ["b", 1]]``: long chains stay readable in a file."""
    runs: list[list[Any]] = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return runs


def expand(runs: Sequence[Sequence[Any]]) -> list[str]:
    return [str(name) for name, times in runs for _ in range(int(times))]


def function_topology(graphed: Inspectable) -> dict[str, dict[str, Any]]:
    """The description of every graph ``graphed`` holds, from its backend (CuPy only)."""
    if graphed.backend.name != "cupy":
        raise CupyGraphError(
            f"{graphed.__name__} runs on the {graphed.backend.name} backend, which records no CUDA graph: "
            "a topology can only be read from the CuPy backend's graphs")
    from ..backends.driver.topology import recording_topology

    graphs = {}
    for entry in sorted(graphed.registry.entries(), key=graph_label):
        found = recording_topology(entry.recording)
        graphs[graph_label(entry)] = {**found, "kernels": run_lengths(found["kernels"]), "bytes": int(entry.nbytes)}
    return graphs


def snapshot_data(function: str, graphs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {"cupygraph_topology": FORMAT, "function": function, "graphs": {k: dict(graphs[k]) for k in sorted(graphs)}}


def dumps_snapshot(data: Mapping[str, Any]) -> str:
    """JSON with one line per field and short lists kept on one line (diffs in review stay small)."""
    return _format(data, 0) + "\n"


def _format(value: Any, depth: int) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {_format(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        flat = json.dumps(value)
        if len(flat) <= 80 and not any(isinstance(v, Mapping) for v in value):
            return flat
        return "[\n" + ",\n".join(f"{inner}{_format(v, depth + 1)}" for v in value) + f"\n{pad}]"
    return json.dumps(value)


def save_snapshot(path: Union[str, Path], function: str, graphs: Mapping[str, Mapping[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_snapshot(snapshot_data(function, graphs)), encoding="utf-8")
    return path


def load_snapshot(path: Union[str, Path]) -> dict[str, dict[str, Any]]:
    """The graphs of a snapshot file; ``SnapshotError`` naming the file and field when malformed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SnapshotError(f"{path}: not JSON ({err}); rewrite it with --cupygraph-update-snapshots") from err
    if not isinstance(data, dict) or data.get("cupygraph_topology") != FORMAT:
        raise SnapshotError(f"{path}: not a cupygraph topology snapshot (format {FORMAT}); "
                            "rewrite it with --cupygraph-update-snapshots")
    graphs = data.get("graphs")
    if not isinstance(graphs, dict):
        raise SnapshotError(f"{path}: field 'graphs' must be a mapping of graph names to descriptions")
    for label, graph in graphs.items():
        problem = _shape_problem(graph)
        if problem:
            raise SnapshotError(f"{path}: graphs.{label}: {problem}")
    return graphs


def _shape_problem(graph: Any) -> str:
    if not isinstance(graph, dict):
        return "must be a mapping"
    for name in _COUNTED:
        if not isinstance(graph.get(name, 0), int):
            return f"field {name!r} must be an integer"
    if not isinstance(graph.get("nodes_by_kind", {}), dict):
        return "field 'nodes_by_kind' must be a mapping of node kinds to counts"
    runs = graph.get("kernels", [])
    if not isinstance(runs, list) or not all(isinstance(r, list) and len(r) == 2 and isinstance(r[1], int)
                                              for r in runs):
        return "field 'kernels' must be a list of [name, times] pairs"
    for name in _LISTED:
        if not isinstance(graph.get(name, []), list):
            return f"field {name!r} must be a list"
    return ""


# -- differences ------------------------------------------------------------------------------------


def diff_topologies(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]],
                    *, bytes_tolerance: float = 0.1) -> list[str]:
    """Every difference between two descriptions, one sentence each, prefixed by the graph's name.

    ``bytes_tolerance`` is relative: bytes held may move by that fraction before it counts.
    """
    lines = []
    for label in sorted(set(old) | set(new)):
        if label not in new:
            lines.append(f"{label}: this graph was not captured (it is in the snapshot)")
        elif label not in old:
            lines.append(f"{label}: a new graph was captured (not in the snapshot)")
        else:
            lines += [f"{label}: {line}" for line in diff_graph(old[label], new[label], bytes_tolerance)]
    return lines


def diff_graph(old: Mapping[str, Any], new: Mapping[str, Any], bytes_tolerance: float = 0.1) -> list[str]:
    lines = _diff_kernels(expand(old.get("kernels", [])), expand(new.get("kernels", [])))
    for kind in ("memcpy", "memset"):
        lines += _diff_items(f"a {kind} node", old.get(kind, []), new.get(kind, []))
    lines += _diff_items("a conditional node", old.get("conditional", []), new.get("conditional", []))
    pieces_old, pieces_new = int(old.get("pieces", 1)), int(new.get("pieces", 1))
    if pieces_old != pieces_new:
        lines.append(f"now {_plural(pieces_new, 'piece')}, was {pieces_old}")
    breaks_old, breaks_new = list(old.get("graph_breaks", [])), list(new.get("graph_breaks", []))
    lines += _diff_items("a graph break", breaks_old, breaks_new)
    if Counter(breaks_old) == Counter(breaks_new) and breaks_old != breaks_new:
        lines.append(f"graph breaks run in another order: now {breaks_new}, was {breaks_old}")
    kinds_old, kinds_new = old.get("nodes_by_kind", {}), new.get("nodes_by_kind", {})
    for kind in sorted(set(kinds_old) | set(kinds_new)):
        if kind in ("kernel", "memcpy", "memset", "conditional"):
            continue  # said above, by name
        a, b = int(kinds_old.get(kind, 0)), int(kinds_new.get(kind, 0))
        if a != b:
            lines.append(f"`{kind}` nodes: now {b}, was {a}")
    lines += _diff_bytes(int(old.get("bytes", 0)), int(new.get("bytes", 0)), bytes_tolerance)
    return lines


def _diff_kernels(old: list[str], new: list[str]) -> list[str]:
    before, after = Counter(old), Counter(new)
    lines = []
    for name in dict.fromkeys(old + new):  # first appearance order
        a, b = before[name], after[name]
        if a == b:
            continue
        if a == 0:
            lines.append(f"kernel `{name}` appeared (launched {_plural(b, 'time')})")
        elif b == 0:
            lines.append(f"kernel `{name}` is gone (was launched {_plural(a, 'time')})")
        else:
            lines.append(f"kernel `{name}` now launched {_plural(b, 'time')}, was {a}")
    if not lines and old != new:
        at = next(i for i, (x, y) in enumerate(zip(old, new)) if x != y)
        lines.append(f"kernels run in another order: launch {at + 1} is now `{new[at]}`, was `{old[at]}`")
    return lines


def _diff_items(what: str, old: Sequence[Any], new: Sequence[Any]) -> list[str]:
    before, after = Counter(map(str, old)), Counter(map(str, new))
    lines = []
    for item, count in (after - before).items():
        lines.append(f"{what} appeared ({item})" if count == 1 else f"{count} x {what} appeared ({item})")
    for item, count in (before - after).items():
        lines.append(f"{what} disappeared ({item})" if count == 1 else f"{count} x {what} disappeared ({item})")
    return lines


def _diff_bytes(old: int, new: int, tolerance: float) -> list[str]:
    if abs(new - old) <= tolerance * max(old, new):
        return []
    change = f"{(new - old) / old:+.1%}" if old else "from none"
    return [f"bytes held now {new:,}, was {old:,} ({change}; tolerance {tolerance:.0%})"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
