"""Memory safety of graphs on the GPU (issue 19): a replay never touches memory it does not own.

Each scenario runs in its own process (``memsafety_scenarios.py``): a replay that writes into freed
memory can kill the CUDA context, which must not take the rest of the suite with it. The timeout
only bounds a hung process; nothing here is timed.

* cuFFT: an eager FFT caches its plan, a graph of the same FFT is captured, the plan leaves CuPy's
  cache (``clear()``, or LRU eviction by 17 other lengths), allocations take the freed memory, and
  replays on fresh data still equal eager bit for bit and change no other array; the same as the
  first thing a fresh process does, under allocation churn; with the fix bypassed, the poisoning
  helper fails.
* A closure array: a warning at capture names it; rebound after capture, the poisoning helper
  fails (read and write), and debug mode refuses the replay.
* The audit reaches into conditional-node bodies and every piece of a PIECEWISE recording.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

SCRIPT = Path(__file__).with_name("memsafety_scenarios.py")
ROOT = SCRIPT.parents[2]


def run_scenario(name: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("CUPYGRAPH_DISABLE", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), name], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"scenario {name} exited with {proc.returncode}:\n{output[-4000:]}"
    assert f"OK {name}" in proc.stdout, output[-4000:]
    return output


@pytest.mark.parametrize("eviction", ["clear", "lru"])
def test_cufft_graph_keeps_its_plan_after_the_plan_leaves_cupys_cache(eviction):
    output = run_scenario(f"fft_{eviction}")
    assert "sentinels:" in output


def test_cufft_graph_in_a_fresh_process_under_allocation_churn():
    run_scenario("fft_fresh")


def test_poisoning_helper_fails_on_the_cufft_graph_with_the_fix_bypassed():
    output = run_scenario("fft_unsafe")
    assert "HELPER FAILED" in output


def test_closure_array_rebound_after_capture_warns_fails_the_helper_and_errors_in_debug_mode():
    output = run_scenario("closure")
    assert "HELPER FAILED (read)" in output and "HELPER FAILED (write)" in output
    assert "debug error:" in output


def test_audit_walks_conditional_bodies_and_piecewise_pieces():
    output = run_scenario("structure")
    assert "piecewise: pieces 2" in output
