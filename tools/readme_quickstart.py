#!/usr/bin/env python3
"""Run the README's quick-start code block as written (a check that the docs still work; GPU only)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart_code() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        raise SystemExit("README.md has no python block under '## Quick start'")
    return match.group(1)


if __name__ == "__main__":
    exec(compile(quickstart_code(), "README.md#quick-start", "exec"), {"__name__": "__main__"})
