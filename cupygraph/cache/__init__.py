"""Layer 5, the one graph cache: ``CUDAGraphRegistry`` and its store, keys, entries (the replay
hot path), capture, eviction, memory accounting, failed keys, freshness checks and ``CUDAGraphStats``.

May import foundation, config, dispatch, backends and control_flow/linalg/random; never compat,
diagnostics, api, testing or the CLI.
"""
