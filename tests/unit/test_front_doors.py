"""The front doors are adapters (issue 28): every layer above the cache reaches it through its front
module (``cupygraph.cache``), the main path decides through the dispatch layer's ``Dispatcher``, and
a miss of each door is one call into the cache (``find_or_capture``).

Each structural check runs on a graph given to it, so the tests below also show it can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from repo_files import load_tool

import cupygraph as cg

HOST = {"backend": "host", "capture_sizes": [1, 2, 4, 8]}
TOOL = load_tool("import_graph")


def behind_the_front(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module inside ``cupygraph.cache`` by a module outside it."""
    return [f"{module} imports {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
            if target.startswith("cupygraph.cache.") and not module.startswith("cupygraph.cache")]


def test_the_layers_above_reach_the_cache_through_its_front():
    found = behind_the_front(TOOL.import_graph())
    assert not found, "import the cache from cupygraph.cache:\n  " + "\n  ".join(found)


def test_an_import_behind_the_front_is_named():
    graph = {"cupygraph.api.jit": {"cupygraph.cache", "cupygraph.cache.store"}, "cupygraph.cache.store": set(),
             "cupygraph.cache": {"cupygraph.cache.store"}}
    assert behind_the_front(graph) == ["cupygraph.api.jit imports cupygraph.cache.store"]


def test_the_main_path_decides_through_the_dispatch_layers_dispatcher():
    f = cg.jit(lambda x: x + 1, config=HOST)
    manager = cg.CUDAGraphManager(HOST)
    assert type(f.dispatcher) is cg.Dispatcher and type(manager.dispatcher) is cg.Dispatcher
    assert type(f.dispatcher).__module__ == "cupygraph.dispatch.dispatcher"


DOOR_CALLS = ("find_or_capture", "verdict_for", "capture_or_fail", "lookup", "entries", "rekey", "capture_entry")


@pytest.fixture
def asked(monkeypatch):
    """The registry methods a front door calls (not the ones the registry calls inside them)."""
    calls: list[str] = []
    depth = [0]
    for name in DOOR_CALLS:
        method = getattr(cg.CUDAGraphRegistry, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            if depth[0] == 0:
                calls.append(_name)
            depth[0] += 1
            try:
                return _method(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(cg.CUDAGraphRegistry, name, counted)
    return calls


def test_a_miss_of_jit_is_one_call_into_the_cache(asked):
    f = cg.jit(lambda a: a * 2, config=HOST)
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(f(x), x * 2)  # a capture
    np.testing.assert_array_equal(f.call_with_descriptor(cg.BatchDescriptor(4), x), x * 2)  # a miss that finds it
    assert asked == ["find_or_capture", "find_or_capture"] and f.registry.num_graphs() == 1


def test_a_miss_of_the_wrapper_is_one_call_into_the_cache(asked):
    wrapper = cg.CUDAGraphWrapper(lambda a: a * 2, cg.CUDAGraphMode.FULL, config=HOST)
    x = np.arange(12.0).reshape(4, 3)
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(4)):
        np.testing.assert_array_equal(wrapper(x), x * 2)
    assert asked == ["find_or_capture"] and wrapper.registry.num_graphs() == 1
