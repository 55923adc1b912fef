"""Layer 6, seed names with no natural home, kept for users' code and delegating to the owners:
``CudagraphDispatcher`` (``dispatch.Dispatcher`` with the seed's graph-cache surface on the one
registry), the second names ``DispatchMode``/``DispatchKey``/``GraphEntry`` and ``MockCUDAGraph``.
Nothing below this layer uses them, and the main path (``jit``, the manager) neither.

May import foundation, config, dispatch, backends, control_flow/linalg/random and cache; never
diagnostics, api, testing or the CLI.
"""
