"""Zero-copy: when a replay may read the caller's array instead of a copy, and re-pointing nodes.

``binding.py`` the rules both backends follow (``copy_reason``) and the reasons; ``node_pointers.py``
which kernel-node words hold each buffer, read once from the capture's snapshot; ``binder.py`` the
GPU's per-call binding onto the recording's banks. Imports: ``driver``, ``fastpath``, ``cupy.recording``.
"""
