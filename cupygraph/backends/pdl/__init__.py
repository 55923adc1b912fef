"""Programmatic dependent launch after capture: which modules' sources are known and their kernels'
waits (``modules.py``, ``ptx_scan.py``), which CuPy object loaded a graph's kernel (``discovery.py``),
which edges to convert (``edges.py``, pure), and the rewrite of the captured graphs (``rewrite.py``).
Imports: ``driver``.
"""
