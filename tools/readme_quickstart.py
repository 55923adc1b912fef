#!/usr/bin/env python3
"""The README's python snippets: which of them CI runs, and a runner for the quick start.

Every ```python block of README.md runs on the host backend (NumPy, no GPU) unless the line right
above its fence says why not, as an HTML comment: ``<!-- not run on CI: needs CuPy and a GPU -->``.
tests/unit/test_docs.py runs every other snippet in a fresh interpreter, so the docs cannot drift.

    python tools/readme_quickstart.py          # the quick start's CPU variant (host backend)
    python tools/readme_quickstart.py --gpu    # the quick start on the GPU (CuPy)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import NamedTuple, Optional

README = Path(__file__).resolve().parents[1] / "README.md"
NOT_RUN = re.compile(r"^<!--\s*not run on CI:(.*?)-->\s*$")


class Snippet(NamedTuple):
    line: int  # of the opening fence, 1-based
    section: str  # the enclosing "## " heading
    code: str
    not_run: Optional[str]  # why CI does not run it, from the marker above it; None: CI runs it


def snippets(text: str) -> list[Snippet]:
    lines = text.splitlines()
    found, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.strip() == "```python":
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise ValueError(f"README.md:{i + 1}: the python block is never closed")
            marker = NOT_RUN.match(lines[i - 1].strip()) if i > 0 else None
            code = "\n".join(lines[i + 1:end]) + "\n"
            found.append(Snippet(i + 1, section, code, marker.group(1).strip() if marker else None))
            i = end
        i += 1
    return found


def readme_snippets() -> list[Snippet]:
    return snippets(README.read_text(encoding="utf-8"))


def quickstart(gpu: bool) -> Snippet:
    """The quick start's GPU snippet (the one CI does not run) or its CPU variant (the one it runs)."""
    for snippet in readme_snippets():
        if snippet.section == "Quick start" and (snippet.not_run is not None) == gpu:
            return snippet
    raise SystemExit(f"README.md has no {'GPU' if gpu else 'CPU'} python block under '## Quick start'")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="run the GPU quick start (needs CuPy and a GPU)")
    snippet = quickstart(parser.parse_args(argv).gpu)
    exec(compile(snippet.code, f"README.md:{snippet.line}", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
