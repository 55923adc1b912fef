"""What a capture must refuse or account for: host uploads (``uploads.py`` the ledger and policy,
``cupy_uploads.py`` / ``host_uploads.py`` the interceptions), the host reference's refusals
(``host_guard.py``, ``host_escapes.py``; ``host_capturable.py`` for the ops that capture on the
GPU), and the address audit (``audit.py`` classification, ``cupy_audit.py`` from the capture's
snapshot, ``foreign.py`` closure and global arrays, ``library_kernels.py`` kernels of held
libraries). Imports: ``driver``, ``base``.
"""
