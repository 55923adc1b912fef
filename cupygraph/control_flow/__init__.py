"""Layer 4, control flow inside graphs: ``while_loop``, ``cond`` and ``switch`` (host reference and CUDA
conditional nodes).

May import foundation, config, dispatch and backends; never cache or anything above it.
"""

from .loops import cond, conditional_nodes_unavailable_reason, switch, switch_nodes_unavailable_reason, while_loop

__all__ = ["cond", "conditional_nodes_unavailable_reason", "switch", "switch_nodes_unavailable_reason", "while_loop"]
