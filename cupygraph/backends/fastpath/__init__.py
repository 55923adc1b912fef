"""The compiled replay: one shortcut's steady call served in C from an immutable record.

``_replay.c`` (the extension, built by ``setup.py`` where a C compiler is found) holds ``FastFunction``
(the base of every jitted function), ``Record`` (what C reads, built once per shortcut), and the two
mutable objects C writes: ``ReplayCounts`` (per entry) and ``FamilyState`` (per graph family).
``compiled.py`` gives them, or Python stand-ins without a compiler; ``record.py`` builds a Record.
Imports: nothing of cupygraph but ``driver`` (the ``cuGraphLaunch`` entry point) and CuPy.
"""
