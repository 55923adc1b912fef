"""tools/bench.py without a GPU: CLI, timing loop, per-competitor error rows, JSON/Markdown/plots.

The GPU parts (CuPy, PyTorch, JAX) are replaced by NumPy fakes; what runs is the harness's own
control flow, so a typo in it cannot first show up on the GPU machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import bench, bench_report  # noqa: E402
from tools.bench_peers import Competitor  # noqa: E402
from tools.bench_workloads import random_inputs  # noqa: E402


class NumpyAdapter:
    name = "cupy"
    method = "numpy fake"

    def upload(self, a):
        return np.asarray(a)

    def finish(self, out):
        pass

    def to_numpy(self, out):
        return np.asarray(out)

    def start(self):
        return time.perf_counter()

    def stop(self, token, out):
        return (time.perf_counter() - token) * 1e3


class FakeFrameworks:
    def __init__(self, load_torch=True, load_jax=True):
        self.adapter = NumpyAdapter()

    def get(self, name):
        if name == "cupy":
            return self.adapter
        raise RuntimeError(f"{name} unavailable: not installed in this test")

    def device_sync(self):
        pass

    def release_memory(self):
        pass

    def environment(self):
        return dict(card="fake", cupy="none")


class FakeCase(bench.Case):
    def __init__(self, workload, size, shapes, seed, frameworks):
        self.workload, self.size, self.frameworks = workload, size, frameworks
        self.host_inputs = random_inputs(shapes, seed)
        self.host_params = []
        self.cupy_inputs = list(self.host_inputs)
        self.cupy_params = []
        self.eager = lambda x: np.tanh(x) * 2
        self._converted = {}


def fake_build(case, key, serving):
    fw = case.frameworks.get("cupy")
    if key == "jit-view":  # a competitor whose result is wrong must become an error row
        return Competitor(key, lambda x: np.tanh(x) * 2 + 1e-3, case.cupy_inputs, fw, exact=True)
    if key in ("torch", "torch-graph", "torch-compile", "jax"):
        case.frameworks.get(key.split("-")[0])
    return Competitor(key, case.eager, case.cupy_inputs, fw, exact=key != "bare",
                      graph_bytes=(lambda: 4096) if key == "bare" else None)


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(bench, "Frameworks", FakeFrameworks)
    monkeypatch.setattr(bench, "Case", FakeCase)
    monkeypatch.setattr(bench, "build", fake_build)
    monkeypatch.setattr(bench, "run_capture", lambda: dict(
        workload="capture", sizes=51, largest_size=512, graphs=51, capture_all_s=0.5, capture_largest_s=0.05,
        time_ratio=10.0, pool_bytes_all=110, pool_bytes_largest=100, memory_ratio=1.1, fallbacks=0))


def test_help_runs_without_cupy_torch_or_jax():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "--help"],
                         capture_output=True, text=True, check=True)
    assert "--quick" in out.stdout and "--plots" in out.stdout


def test_bad_workload_and_skipping_the_reference_are_refused():
    with pytest.raises(SystemExit):
        bench.parse_args(["--workloads", "chain,nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--skip", "cupy"])


def test_quick_run_writes_rows_errors_tables_and_json(fake_gpu, tmp_path):
    out, md = tmp_path / "bench.json", tmp_path / "results.md"
    assert bench.main(["--quick", "--reps", "6", "--out", str(out), "--markdown", str(md)]) == 0
    data = json.loads(out.read_text())
    rows = data["results"]
    assert {r["workload"] for r in rows} == {"chain", "stencil", "stencil-serving", "mlp", "piecewise"}
    by_key = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    assert all(r["ratio_to_bare_graph"] == pytest.approx(r["latency_us"] / next(
        b["latency_us"] for b in by_key["bare"] if b["workload"] == r["workload"] and b["size"] == r["size"]))
        for r in by_key["jit-copy"] if r["workload"] != "stencil-serving")
    assert all("differs from eager CuPy" in r["error"] for r in by_key["jit-view"])
    assert all("torch unavailable" in r["error"] for r in by_key["torch-compile"])
    serving = [r for r in rows if r["workload"] == "stencil-serving"]
    assert {r["key"] for r in serving} == set(bench.SERVING_COMPETITORS)
    assert all(r.get("ratio_to_bare_graph") is None for r in serving)
    assert data["capture"]["memory_ratio"] == 1.1
    text = md.read_text()
    assert "## chain" in text and "## capture" in text and "result differs from eager CuPy" in text


def test_measure_drops_a_competitor_that_raises_and_keeps_the_others():
    fw = NumpyAdapter()
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("boom")
        return x

    good = Competitor("cupy", lambda x: x, [np.ones(3)], fw)
    bad = Competitor("bare", flaky, [np.ones(3)], fw)
    figures, errors = bench.measure([good, bad], reps=10, rounds=2, batch=4, device_sync=lambda: None)
    assert set(figures) == {"cupy"} and figures["cupy"]["latency_reps"] == 10
    assert "boom" in errors["bare"]


def test_plots_one_file_per_run(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [dict(workload=w, axis="n", size=s, competitor=c, latency_us=float(s) ** 0.5 * k, gpu_us=1.0 * k)
            for w in ("chain", "mlp") for s in (1, 16, 64) for k, c in ((1, "a"), (2, "b"))]
    rows.append(dict(workload="chain", axis="n", size=1, competitor="c", error="failed"))
    paths = bench_report.write_plots(rows, tmp_path)
    assert [p.name for p in paths] == [bench_report.PLOT_FILE] and paths[0].stat().st_size > 1000


def test_a_failing_workload_is_reported_and_the_others_still_run(fake_gpu, monkeypatch, tmp_path):
    class BrokenChain(FakeCase):
        def __init__(self, workload, *args, **kwargs):
            if workload.name == "chain":
                raise RuntimeError("kernel compile failed")
            super().__init__(workload, *args, **kwargs)

    monkeypatch.setattr(bench, "Case", BrokenChain)
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--reps", "3", "--workloads", "chain,mlp", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert "kernel compile failed" in data["notes"]["chain"][0]
    assert {r["workload"] for r in data["results"]} == {"mlp"}
