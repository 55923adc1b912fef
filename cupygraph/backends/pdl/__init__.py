"""Programmatic dependent launch after capture: which modules cupygraph compiled and their kernels'
waits (``modules.py``, ``ptx_scan.py``), which edges to convert (``edges.py``, pure), and the rewrite of
the captured graphs (``rewrite.py``). Imports: ``driver``.
"""
