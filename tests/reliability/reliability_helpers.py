"""Helpers shared by the reliability tests: stats invariants and the figures file.

Each test that has a figure worth reporting (cases tried, failures, memory drift) calls
``record``; when ``CUPYGRAPH_RELIABILITY_OUT`` names a file, one JSON object per line is appended
to it, and ``tools/reliability.py`` turns those lines into the table of RELIABILITY.md.
Without the variable nothing is written (plain CI runs).
"""

from __future__ import annotations

import json
import os
import platform
import time
from typing import Any, Optional

ENV_OUT = "CUPYGRAPH_RELIABILITY_OUT"


def record(
    category: str,
    test: str,
    *,
    cases: int,
    failures: int = 0,
    backend: str = "host",
    drift: Optional[dict[str, Any]] = None,
    **extra: Any,
) -> dict[str, Any]:
    """Append one figure line (and print it, so ``pytest -s`` shows it too)."""
    row = {
        "category": category,
        "test": test,
        "backend": backend,
        "cases": int(cases),
        "failures": int(failures),
        "drift": drift or {},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": platform.node(),
        **extra,
    }
    print("reliability:", json.dumps(row, default=str))
    path = os.environ.get(ENV_OUT)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row, default=str) + "\n")
    return row


def check_stats(f: Any, calls: int) -> None:
    """The invariants every front door keeps: hits + misses == calls; captures - evictions == held."""
    stats = f.stats()
    held = f.registry.num_graphs()
    assert stats.hits + stats.misses == calls, (stats.to_dict(), calls)
    assert stats.captures - stats.evictions == held, (stats.to_dict(), held)
    assert stats.calls == calls
