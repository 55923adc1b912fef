#!/usr/bin/env python3
"""Run the reliability suite's GPU variants and print the table RELIABILITY.md keeps.

    python3 tools/reliability.py                 # tests/reliability -m gpu, default lengths
    python3 tools/reliability.py --soak          # the long variants (1 000 000 replays, ...)
    python3 tools/reliability.py --host          # the host variants too (no -m gpu)
    python3 tools/reliability.py --markdown      # the table as Markdown, for RELIABILITY.md
    python3 tools/reliability.py --out r.json    # keep every figure line and the table as JSON

The header names what a table needs to be quoted honestly: the device, the machine (CPU cores,
architecture, Python and NumPy), the commit (and whether the tree had changes), the start in UTC,
the command and pytest's totals. Counts change with the suite (hypothesis examples, the bad-config
corpus), so a table holds for the commit it names.

Each test appends its figures (cases tried, memory drift) as JSON lines to the file named by
``CUPYGRAPH_RELIABILITY_OUT``; failures come from pytest's JUnit XML. The table has one row per
category: cases tried, failed tests, and the largest memory drift seen (family pool, CuPy's
default pool, free device memory, host RSS, Python objects). Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "reliability"
CATEGORIES = ["fuzz", "faults", "stale_outputs", "pointers", "memory_pressure", "threads", "soak", "bad_configs"]
FILE_CATEGORY = {
    "test_fuzz": "fuzz", "test_faults": "faults", "test_stale_outputs": "stale_outputs", "test_pointers": "pointers",
    "test_memory_pressure": "memory_pressure", "test_threads": "threads", "test_soak": "soak",
    "test_bad_configs": "bad_configs",
}
DRIFT_KEYS = [  # (key in the figures, column label, unit divisor, unit)
    ("family_pool_bytes", "family pool", 1, "B"),
    ("default_pool_used", "default pool used", 1, "B"),
    ("device_free", "device free", 1, "B"),
    ("rss", "host RSS", 1, "B"),
    ("traced_bytes", "host traced", 1, "B"),
    ("python_objects", "Python objects", 1, ""),
]


def category_of(classname: str) -> Optional[str]:
    """The category of a JUnit test case from its class name (``tests.reliability.test_soak_gpu``)."""
    for part in classname.split("."):
        for prefix, category in FILE_CATEGORY.items():
            if part.startswith(prefix):
                return category
    return None


def read_figures(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"reliability.py: skipping a line that is not JSON: {line[:80]}", file=sys.stderr)
    return rows


def read_junit(path: Path) -> dict[str, dict[str, int]]:
    """Per category: tests passed, failed (failures and errors) and skipped."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        category = category_of(case.get("classname", ""))
        if category is None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            counts[category]["failed"] += 1
        elif case.find("skipped") is not None:
            counts[category]["skipped"] += 1
        else:
            counts[category]["passed"] += 1
    return counts


def read_totals(path: Path) -> dict[str, int]:
    """pytest's totals over every test case of the run: passed, failed (failures and errors), skipped."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    if not path.exists():
        return totals
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            totals["failed"] += 1
        elif case.find("skipped") is not None:
            totals["skipped"] += 1
        else:
            totals["passed"] += 1
    return totals


def machine() -> str:
    """The host the run used: CPU cores and architecture, Python and NumPy (no host name)."""
    try:
        import numpy

        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = "none"
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()}), Python "
            f"{platform.python_version()}, NumPy {numpy_version}")


def commit() -> str:
    """The checked-out commit, and whether the work tree differs from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def _worst(values: list[int]) -> int:
    """The drift farthest from zero (memory that grew shows positive, free memory that shrank negative)."""
    return max(values, key=abs) if values else 0


def table(figures: list[dict[str, Any]], junit: dict[str, dict[str, int]], backend: Optional[str]) -> list[dict]:
    rows = []
    for category in CATEGORIES:
        mine = [f for f in figures
                if f.get("category") == category and (backend is None or f.get("backend") == backend)]
        tests = junit.get(category, {"passed": 0, "failed": 0, "skipped": 0})
        if not mine and not any(tests.values()):
            continue
        drift = {key: _worst([int(f["drift"][key]) for f in mine if key in f.get("drift", {})])
                 for key, *_ in DRIFT_KEYS}
        rows.append({
            "category": category,
            # Tests that record no figure count one case each.
            "cases": sum(int(f.get("cases", 0)) for f in mine) or tests["passed"] + tests["failed"],
            "failures": tests["failed"] + sum(int(f.get("failures", 0)) for f in mine),
            "tests": tests,
            "drift": {k: v for k, v in drift.items() if any(k in f.get("drift", {}) for f in mine)},
        })
    return rows


def _fmt_bytes(value: int) -> str:
    sign = "-" if value < 0 else "+" if value > 0 else ""
    value = abs(value)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{sign}{value / size:.1f} {unit}"
    return f"{sign}{value} B"


def _fmt_drift(drift: dict[str, int]) -> str:
    if not drift:
        return "-"
    parts = []
    for key, label, _, unit in DRIFT_KEYS:
        if key in drift:
            parts.append(f"{label} {_fmt_bytes(drift[key]) if unit == 'B' else f'{drift[key]:+d}'}")
    return "; ".join(parts)


def render(rows: list[dict], markdown: bool) -> str:
    header = ["category", "cases tried", "failures", "memory drift (worst run)"]
    body = [[r["category"], f"{r['cases']:,}", str(r["failures"]), _fmt_drift(r["drift"])] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def device_name() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else name
        return f"{name} (CuPy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()})"
    except Exception as err:  # the table still prints
        return f"no GPU ({type(err).__name__}: {err})"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--soak", action="store_true", help="run the long variants")
    parser.add_argument("--host", action="store_true", help="run the host variants too (not only -m gpu)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--out", type=Path, help="write the figures and the table to this JSON file")
    parser.add_argument("--figures", type=Path, help="only print the table of an existing figures file (no run)")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args(argv)

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    python = Path(sys.executable)
    python_shown = str(python.relative_to(ROOT)) if python.is_relative_to(ROOT) else "python3"
    shown = " ".join([python_shown, "tools/reliability.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory() as tmp:
        figures_path = args.figures or Path(tmp) / "figures.jsonl"
        junit_path = Path(tmp) / "junit.xml"
        status = 0
        if args.figures is None:
            command = [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
                       f"--junitxml={junit_path}", "-o", "junit_family=xunit2"]
            if not args.host:
                command += ["-m", "gpu"]
            if args.soak:
                command.append("--soak")
            command += args.pytest_args
            env = dict(os.environ, CUPYGRAPH_RELIABILITY_OUT=str(figures_path))
            print("$ " + " ".join(command), flush=True)
            status = subprocess.call(command, cwd=ROOT, env=env)
        figures = read_figures(figures_path)
        junit = read_junit(junit_path)
        totals = read_totals(junit_path)
    rows = table(figures, junit, None if args.host else "cupy")
    print()
    print(f"cupygraph reliability: {device_name()}; {machine()}; commit {commit()}; started {started}; `{shown}`")
    if args.figures is None:
        print(f"pytest: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    print(render(rows, args.markdown))
    if not rows:
        print("(no figures: were the GPU tests skipped? run with -rs to see why)")
    if args.out:
        args.out.write_text(json.dumps({"device": device_name(), "machine": machine(), "commit": commit(),
                                        "command": shown, "started": started, "soak": args.soak,
                                        "table": rows, "figures": figures}, indent=2, default=str), encoding="utf-8")
        print(f"wrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
