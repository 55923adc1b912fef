#!/usr/bin/env python3
"""Benchmark cupygraph against eager CuPy and a bare hand-captured CuPy graph, on one GPU.

Method: every competitor is checked against eager CuPy on fresh random data, then warmed up;
latency is the median of many synchronised calls (host clock after a device sync); throughput is
back-to-back calls timed with CUDA events (GPU time per call) and the host clock (issue cost per
call). All figures come from one process on one card; compare ratios, not absolute times.

    python tools/bench.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupygraph as cg  # noqa: E402
from cupygraph.demo import make_heat_cupy  # noqa: E402
from cupygraph.kernels import get_kernel  # noqa: E402


def chain_fn(length: int = 100) -> Callable[[Any], Any]:
    """``length`` tiny elementwise RawKernel launches (alternating affine and squash)."""
    affine = get_kernel("elementwise.cu", "affine")
    squash = get_kernel("elementwise.cu", "squash")

    def chain(x: Any) -> Any:
        n = x.size
        grid = (min(1024, (n + 255) // 256),)
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        src = x
        for i in range(length // 2):
            affine(grid, (256,), (src, a, np.int64(n), np.float32(1.0 + 1e-3 * i), np.float32(0.01)))
            squash(grid, (256,), (a, b, np.int64(n)))
            src = b
        return src

    return chain


class BareGraph:
    """The floor: a hand-captured CuPy graph at the exact size, one input memcpy, no output copy."""

    def __init__(self, fn: Callable[[Any], Any], example: Any):
        self.static_in = cupy.empty_like(example)
        self.static_in[...] = example
        fn(self.static_in)  # warm-up: compile, plan caches
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            self.static_out = fn(self.static_in)
            self.graph = stream.end_capture()
        stream.synchronize()
        self.graph.upload(cupy.cuda.get_current_stream())

    def __call__(self, x: Any) -> Any:
        cupy.cuda.runtime.memcpyAsync(
            self.static_in.data.ptr, x.data.ptr, x.nbytes, cupy.cuda.runtime.memcpyDefault,
            cupy.cuda.get_current_stream().ptr,
        )
        self.graph.launch()
        return self.static_out


def measure(competitors: dict[str, Callable[[Any], Any]], inputs: list[Any], reps: int) -> dict[str, dict]:
    """Interleaved timing, so clock drift and thermal state hit every competitor alike.

    latency: median (and inter-quartile range) of synchronised single calls, host clock.
    throughput: rounds of back-to-back calls; host issue time per call (host clock) and GPU time
    per call (CUDA events); medians over the rounds.
    """
    stream = cupy.cuda.get_current_stream()
    sync = stream.synchronize
    lat: dict[str, list[float]] = {name: [] for name in competitors}
    for i in range(reps):
        x = inputs[i % len(inputs)]
        for name, fn in competitors.items():
            sync()
            start = time.perf_counter()
            fn(x)
            sync()
            lat[name].append((time.perf_counter() - start) * 1e6)
    host: dict[str, list[float]] = {name: [] for name in competitors}
    gpu: dict[str, list[float]] = {name: [] for name in competitors}
    batch = 50
    for _ in range(max(3, reps // batch)):
        for name, fn in competitors.items():
            begin, end = cupy.cuda.Event(), cupy.cuda.Event()
            sync()
            begin.record()
            t0 = time.perf_counter()
            for i in range(batch):
                fn(inputs[i % len(inputs)])
            host[name].append((time.perf_counter() - t0) * 1e6 / batch)
            end.record()
            end.synchronize()
            gpu[name].append(cupy.cuda.get_elapsed_time(begin, end) * 1e3 / batch)
    out = {}
    for name in competitors:
        q = np.percentile(lat[name], [25, 50, 75])
        out[name] = dict(latency_us=float(q[1]), latency_iqr_us=float(q[2] - q[0]),
                         host_issue_us=float(np.median(host[name])), gpu_us=float(np.median(gpu[name])))
    return out


def check(name: str, fn: Callable[[Any], Any], ref: Callable[[Any], Any], inputs: list[Any]) -> None:
    for x in inputs[:3]:
        got, want = cupy.asnumpy(fn(x)), cupy.asnumpy(ref(x))
        if not np.array_equal(got, want):
            raise SystemExit(f"{name}: result differs from eager CuPy (max abs diff {np.abs(got - want).max()})")


def run_fixed(name: str, fn: Callable[[Any], Any], shape: tuple[int, ...], reps: int) -> list[dict]:
    """Competitors at one fixed shape: eager, bare graph, cupygraph (copy and view outputs)."""
    rng = np.random.default_rng(0)
    inputs = [cupy.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in range(4)]
    competitors: dict[str, Callable[[Any], Any]] = {
        "eager CuPy": fn,
        "bare CuPy graph": BareGraph(fn, inputs[0]),
        "cupygraph jit (copy)": cg.jit(fn, config=dict(capture_sizes=[shape[0]])),
        "cupygraph jit (view)": cg.jit(fn, config=dict(capture_sizes=[shape[0]], output_mode="view")),
    }
    for label, impl in competitors.items():
        check(label, impl, fn, inputs)
        for _ in range(20):
            impl(inputs[0])
    timed = measure(competitors, inputs, reps)
    rows = [dict(workload=name, competitor=label, shape=list(shape), **timed[label]) for label in competitors]
    floor = timed["bare CuPy graph"]["latency_us"]
    eager = timed["eager CuPy"]["latency_us"]
    for r in rows:
        r["ratio_to_bare_graph"] = r["latency_us"] / floor
        r["speedup_over_eager"] = eager / r["latency_us"]
    return rows


def run_varying(name: str, fn: Callable[[Any], Any], trailing: tuple[int, ...], reps: int) -> list[dict]:
    """Variable batch sizes (serving-like: many small, a few large): eager vs cupygraph."""
    rng = np.random.default_rng(1)
    sizes = np.minimum(rng.geometric(0.05, size=64), 256).tolist()
    inputs = [cupy.asarray(rng.standard_normal((n,) + trailing).astype(np.float32)) for n in sizes]
    graphed = cg.jit(fn, config=dict(max_capture_size=256))
    start = time.perf_counter()
    graphed.warmup(inputs[0], progress=False)
    cupy.cuda.Device().synchronize()
    capture_s = time.perf_counter() - start
    competitors = {"eager CuPy": fn, "cupygraph jit (copy)": graphed}
    for label, impl in competitors.items():
        check(label, impl, fn, inputs)
    timed = measure(competitors, inputs, reps)
    rows = [dict(workload=name, competitor=label, shape=["1..256"] + list(trailing), **timed[label])
            for label in competitors]
    rows[1]["speedup_over_eager"] = rows[0]["latency_us"] / rows[1]["latency_us"]
    rows[1]["capture_all_sizes_s"] = capture_s
    rows[1]["graphs"] = graphed.registry.num_graphs()
    rows[1]["graph_bytes"] = graphed.registry.backend.pool_bytes()
    return rows


def environment() -> dict:
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return dict(
        card=props["name"].decode(), driver=cupy.cuda.runtime.driverGetVersion(),
        cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(), cupy=cupy.__version__, numpy=np.__version__,
        python=platform.python_version(), date=time.strftime("%Y-%m-%d"),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    reps = 200 if args.quick else 1000
    env = environment()
    print(" | ".join(f"{k}: {v}" for k, v in env.items()))
    rows = []
    for n in ((1024, 65536) if args.quick else (1024, 16384, 65536)):
        rows += run_fixed(f"chain n={n}", chain_fn(100), (n,), reps)
    rows += run_fixed("stencil B=16", make_heat_cupy(steps=32), (16, 128, 128), reps)
    rows += run_varying("stencil B~1..256", make_heat_cupy(steps=32), (128, 128), max(100, reps // 5))
    header = f"{'workload':<20} {'competitor':<22} {'latency us':>11} {'iqr':>7} {'issue us':>9} {'gpu us':>9} {'x bare':>7} {'x eager':>8}"
    print(header)
    for r in rows:
        print(f"{r['workload']:<20} {r['competitor']:<22} {r['latency_us']:>11.1f} {r['latency_iqr_us']:>7.1f} "
              f"{r['host_issue_us']:>9.1f} {r['gpu_us']:>9.1f} {r.get('ratio_to_bare_graph', float('nan')):>7.3f} "
              f"{r.get('speedup_over_eager', float('nan')):>8.2f}")
    if args.out:
        args.out.write_text(json.dumps(dict(environment=env, results=rows), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
