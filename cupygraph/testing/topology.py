"""Topology snapshots for GPU CI: fail a test when a pipeline's captured graphs change shape.

``assert_graph_topology(fn, *args, snapshot=path)`` captures ``fn`` (or takes a jitted function),
reads the structure of every graph it holds from the real CUDA graph and compares it with the
JSON snapshot at ``path``; a difference fails with one sentence per change. Running pytest with
``--cupygraph-update-snapshots`` writes the snapshots instead. The fixture ``graph_topology``
keeps snapshots next to the test file, in ``__graph_snapshots__/<module>/<test>.json``.
On the host backend (no CUDA graph to read) the test is skipped with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import pytest

from ..api.jit import GraphedFunction, jit, on_creation
from ..diagnostics.topology import diff_topologies, function_topology, load_snapshot, save_snapshot

UPDATE_OPTION = "--cupygraph-update-snapshots"
SNAPSHOT_DIR = "__graph_snapshots__"

_update_requested = False


def set_update_snapshots(update: bool) -> bool:
    """Make ``assert_graph_topology`` write snapshots instead of comparing (the plugin's option);
    returns the previous setting so it can be put back."""
    global _update_requested
    previous, _update_requested = _update_requested, bool(update)
    return previous


def assert_graph_topology(
    fn: Callable[..., Any],
    *args: Any,
    snapshot: Union[str, Path],
    sizes: Optional[Sequence[int]] = None,
    bytes_tolerance: float = 0.1,
    update: Optional[bool] = None,
    config: Any = None,
    **jit_options: Any,
) -> GraphedFunction:
    """Capture ``fn(*args)`` (and ``sizes``, through ``warmup``) and compare every graph it holds with
    the snapshot file; ``update`` (default: ``--cupygraph-update-snapshots``) writes it instead.

    Compared per graph: node counts by kind, kernel names in launch order, memcpy and memset nodes,
    conditional nodes, pieces and graph breaks, and the bytes held within ``bytes_tolerance``
    (relative). A missing snapshot fails (CI must not pass on a file it never had) unless updating.
    Returns the jitted function.
    """
    if not 0 <= bytes_tolerance < 1:
        raise ValueError(f"bytes_tolerance must be a fraction in [0, 1), got {bytes_tolerance!r}")
    graphed = fn if isinstance(fn, GraphedFunction) else jit(fn, config=config, **jit_options)
    name = graphed.__name__
    if graphed.backend.name != "cupy":
        pytest.skip(f"graph topology of {name}: the {graphed.backend.name} backend records no CUDA graph "
                    "(needs a GPU with CuPy)")
    graphed(*args)
    if sizes is not None:
        graphed.warmup(*args, sizes=sizes, progress=False)
    if graphed.registry.num_graphs() == 0:
        reasons = dict(graphed.stats().fallbacks_by_reason)
        pytest.fail(f"{name} holds no graph to compare: it ran eagerly ({reasons or 'no graph mode for this batch'})")
    found = function_topology(graphed)
    path = Path(snapshot)
    updating = _update_requested if update is None else update
    if not path.exists():
        if updating:
            save_snapshot(path, name, found)
            return graphed
        pytest.fail(f"no topology snapshot of {name} at {path}: run pytest with {UPDATE_OPTION} to write it")
    lines = diff_topologies(load_snapshot(path), found, bytes_tolerance=bytes_tolerance)
    if lines and updating:
        save_snapshot(path, name, found)
    elif lines:
        pytest.fail(f"graph topology of {name} differs from {path}:\n  " + "\n  ".join(lines)
                    + f"\nIf the change is intended, run pytest with {UPDATE_OPTION}.", pytrace=False)
    return graphed


def snapshot_path(request: pytest.FixtureRequest, name: Optional[str] = None) -> Path:
    """``<test dir>/__graph_snapshots__/<module>/<test name>[-name].json`` for the requesting test."""
    test = re.sub(r"[^A-Za-z0-9._-]+", "_", request.node.name).strip("_")
    suffix = "" if name is None else "-" + re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    return Path(request.path).parent / SNAPSHOT_DIR / Path(request.path).stem / f"{test}{suffix}.json"


@pytest.fixture
def graph_topology(request: pytest.FixtureRequest) -> Iterator[Callable[..., GraphedFunction]]:
    """``check(fn, *args, name=None, **options)``: ``assert_graph_topology`` with the snapshot kept
    beside the test file (``name`` tells apart several snapshots of one test); the functions it
    jits are cleared when the test ends."""
    created: list[GraphedFunction] = []
    unsubscribe = on_creation(created.append)
    update = bool(request.config.getoption(UPDATE_OPTION, default=False))

    def check(fn: Callable[..., Any], *args: Any, name: Optional[str] = None, **options: Any) -> GraphedFunction:
        options.setdefault("update", update)
        return assert_graph_topology(fn, *args, snapshot=snapshot_path(request, name), **options)

    try:
        yield check
    finally:
        unsubscribe()
        for f in created:
            f.clear()
