"""The GPU backend: CuPy stream capture, the recording and its executables, the family's memory pool.

``backend.py`` captures (warm-ups, stream capture, the one reading of the graphs, PDL, zero-copy's
analysis, the audit); ``recording.py`` is the one executable type (banks, PDL's executable, launch);
``pieces.py`` graph breaks (PIECEWISE); ``pool.py`` / ``pool_blocks.py`` the family's pool; ``fft.py``
cuFFT plans a graph holds; ``failures.py`` what a failed capture means; ``timing.py`` device samples.
Imports: the other backends packages (``driver``, ``guards``, ``pdl``, ``zerocopy``, ``fastpath``) and CuPy;
imported only when a GPU backend is asked for.
"""
