"""The distributed logic on the host backend for real: two ranks under ``mpiexec -n 2`` over loopback.

``make test`` installs mpi4py and MPICH's wheel (which ships ``mpiexec``) from the test extra. The
job runs ``tests/unit/mpi/lockstep_checks.py`` on every rank; each check compares with results a
rank computes alone on fresh random data. A job that hangs is killed by the timeout and fails,
naming what it printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "unit" / "mpi" / "lockstep_checks.py"
HANG_LIMIT_S = 300  # not a performance bound: only so a deadlock fails instead of blocking CI


def find_mpiexec() -> str | None:
    """The mpiexec beside this Python (MPICH's wheel puts it in the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def checks() -> list[str]:
    import ast

    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")]


@pytest.fixture(scope="module")
def two_rank_job() -> str:
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (make test installs it from the test extra)")
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec found beside this Python or on PATH (make test installs MPICH's wheel)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([mpiexec, "-n", "2", sys.executable, str(SCRIPT)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=HANG_LIMIT_S)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        pytest.fail(f"mpiexec -n 2 did not finish in {HANG_LIMIT_S} s (a hang); it printed:\n{out[-4000:]}")
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.parametrize("check", checks())
def test_check_passes_on_both_ranks(two_rank_job: str, check: str) -> None:
    for rank in (0, 1):
        assert f"PASS {check} on rank {rank}" in two_rank_job, two_rank_job[-3000:]
