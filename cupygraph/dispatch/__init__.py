"""Layer 2, dispatch: ``BatchDescriptor`` keys, the decision (``decide``), policies, the forward
context, ``Dispatcher`` (keys per runtime mode: the dispatcher ``jit`` and the manager decide through)
and ``DispatchStats``. It decides; it holds no graphs.

May import foundation and config only; never backends, cache (the graph cache is reached through
``compat.dispatcher``) or anything above.
"""
