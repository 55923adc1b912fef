"""The README's corpus section is generated from a corpus run's JSON (issue 20), never written by hand."""

from __future__ import annotations

import json

from repo_files import ROOT, load_tool

RUN = {
    "card": "NVIDIA H200", "cupy": "14.2.0", "date": "2026-11-26 09:00 UTC", "total": 4,
    "counts": {"captures": 1, "replacement": 2, "cannot": 1, "wrong": 0, "error": 0},
    "captured_with_replacements": 3, "captured_unchanged_routing_off": 0, "fallbacks_naming_the_line": 3,
    "fallbacks": 3,
    "cases": [
        {"name": "exp", "family": "elementwise", "status": "captures"},
        {"name": "solve", "family": "solver", "status": "replacement", "reason": "library_call", "names_line": True},
        {"name": "gaussian_filter", "family": "ndimage", "status": "replacement", "reason": "host_upload",
         "names_line": True},
        {"name": "unique", "family": "host_read", "status": "cannot", "reason": "data_dependent_shape",
         "names_line": True},
    ],
}


def test_the_section_lists_each_family_by_status_with_the_run_figures():
    corpus = load_tool("corpus")
    section = corpus.readme_section(RUN)
    assert section.startswith(corpus.BEGIN) and section.endswith(corpus.END)
    assert "NVIDIA H200" in section and "75 % captured and correct" in section
    assert "3 of 3 fallback reasons name the user's line" in section
    assert "| solver | - | `solve` | - |" in section
    assert "| host_read | - | - | `unique` |" in section
    assert "| elementwise | `exp` | - | - |" in section
    # Unchanged code without routing (before issue 29), unchanged with it, and after the suggested rewrite.
    assert "| unchanged, `route_library_calls=False` (no library call routed) | 0 of 4 | 0 % |" in section
    assert "| unchanged, default config | 1 of 4 | 25 % |" in section
    assert "| after the suggested rewrite | 3 of 4 | 75 % |" in section


def test_the_readme_section_is_current_with_the_published_run():
    published = ROOT / "benchmarks" / "corpus.json"
    corpus = load_tool("corpus")
    if not published.exists():  # before the first GPU run: the README has no section to keep current
        assert corpus.BEGIN not in (ROOT / "README.md").read_text()
        return
    assert corpus.write_readme(json.loads(published.read_text()), check=True) == 0, (
        "README.md's corpus section is stale: run python tools/corpus.py --readme benchmarks/corpus.json")
