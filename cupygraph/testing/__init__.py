"""pytest plugin and helpers for testing CuPy pipelines under cupygraph (registered as ``pytest11``).

The plugin's hooks live in ``plugin``, the helpers and fixtures in ``helpers``; pytest finds both
here, in the module its entry point names.

Layer 9: may import every layer of the package except the CLI and scripts (layer 10).
"""

from .helpers import (
    GraphStats,
    assert_capturable,
    assert_graph_matches_eager,
    assert_graph_memory_safe,
    cupygraph_leak_check,
    cupygraph_memory_poisoning,
    graph_stats,
)
from .plugin import (
    GPU_MARKER,
    GPU_MARKER_INI,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
)
from .topology import assert_graph_topology, graph_topology

__all__ = [
    "GPU_MARKER", "GPU_MARKER_INI", "GraphStats", "assert_capturable", "assert_graph_matches_eager",
    "assert_graph_memory_safe", "assert_graph_topology", "cupygraph_leak_check", "cupygraph_memory_poisoning",
    "graph_stats", "graph_topology",
    "pytest_addoption", "pytest_collection_modifyitems", "pytest_configure", "pytest_unconfigure",
]
