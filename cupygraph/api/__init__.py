"""Layer 8, the front doors: ``jit``/``GraphedFunction`` (the engine's front door, with its options,
argument rules, fast-path shortcuts and warm-up) and the adapters over it and the cache front
(``cupygraph.cache``): ``CUDAGraphManager``, the vLLM-style wrappers and ``StreamDispatcher``. None
captures or replays on its own: a miss is one call to the cache (``find_or_capture``), a replay is
the entry's.

May import every lower layer (foundation, config, dispatch, backends, control_flow/linalg/random,
cache through its front, compat, diagnostics); never ``testing`` or the CLI.
"""
