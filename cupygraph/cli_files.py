"""The files the ``cupygraph`` command writes: checked before any work, so a bad ``-o`` fails at once.

Reading is ``config.files.read_text_file``'s (every input file of the command goes through it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .errors import CupyGraphError


def check_output_file(path: str, suffixes: Sequence[str], option: str = "-o") -> None:
    """Raise ``CupyGraphError`` naming ``option`` and ``path`` unless a file of one of ``suffixes`` can be
    written there: a known extension, not a directory, in a folder that exists and is writable."""
    target = Path(path)
    shown = f"{option} {path}"
    if target.is_dir():
        raise CupyGraphError(f"{shown}: is a directory; give a file name, such as {target / ('out' + suffixes[0])}")
    if target.suffix.lower() not in suffixes:
        raise CupyGraphError(f"{shown}: unknown extension {target.suffix or '(none)'!r}; use one of "
                             f"{', '.join(suffixes)}")
    folder = target.parent
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise CupyGraphError(f"{shown}: the folder {folder} {what}; create it or write elsewhere")
    if target.exists() and not target.is_file():
        raise CupyGraphError(f"{shown}: exists and is not a regular file; give another file name")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(folder, os.W_OK | os.X_OK)
    if not writable:
        raise CupyGraphError(f"{shown}: cannot write there (permission denied); write elsewhere")
