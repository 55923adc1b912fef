"""Layer 6, the seed API kept for users' code: ``CudagraphDispatcher`` (a ``Dispatcher`` with the
seed's graph-cache surface), the second names ``DispatchMode``/``DispatchKey``/``GraphEntry`` and
``MockCUDAGraph``. Nothing below this layer uses them.

May import foundation, config, dispatch, backends, control_flow/linalg/random and cache; never
diagnostics, api, testing or the CLI.
"""
