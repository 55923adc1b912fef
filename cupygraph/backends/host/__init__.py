"""The NumPy reference backend: the same static buffers and padding as the GPU, re-executing the
function on replay (``backend.py``), and its mirror of zero-copy (``binder.py``).
Imports: ``base``, ``guards`` (what it refuses as the GPU would), ``zerocopy.binding``.
"""
