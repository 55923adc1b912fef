"""Layer 8, the front doors: ``jit``/``GraphedFunction``, ``CUDAGraphManager``, the vLLM-style
wrappers, ``StreamDispatcher``, their options, argument rules, plans and warm-up.

May import every lower layer (foundation, config, dispatch, backends, control_flow/linalg/random,
cache, compat, diagnostics); never ``testing`` or the CLI.
"""
