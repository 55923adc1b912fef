"""The README's configuration reference is generated from the model and must not go stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_config_reference_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_opens_with_the_two_setup_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
