#!/usr/bin/env python3
"""Host and GPU time per call of zero-copy replay (issue 14), one process, one card.

    python3 tools/bench_zero_copy.py [--quick] [--out results.json]

Rows: a one-kernel function at batch 1 (bare ``graph.launch()``, bare launch + input memcpy,
eager CuPy, ``jit`` copying, ``jit`` with ``input_binding="auto"``, all with owned outputs where
the row says so); the chain and stencil workloads at a capture size (a bare graph launched with
no copies at all against ``jit`` auto: latency per call and GPU time back to back); the
PIECEWISE workload's host overhead (``jit`` against the bare piecewise floor); issue 30's host-time
target rows (``tools/bench_targets.py``): one kernel called on 8 input buffers in turn and in random order, in
output copy and view mode, with a constant, with two outputs and with a 4 MiB output, each against a
bare ``graph.launch()`` of its own size timed in the same rotation, and the check list of the target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_targets
from tools.bench_blocks import gpu_block, host_block, in_order, latency_block, rotated


def one_kernel(reps: int) -> dict:
    import cupy

    import cupygraph as cg
    from tools.bench_cupy import BareGraph, OwnedOutput

    def f(x):
        return x * np.float32(2.0)

    rng = np.random.default_rng(0)
    xs = [cupy.asarray(rng.standard_normal((1, 256)).astype(np.float32)) for _ in range(4)]
    x = xs[0]
    bare = BareGraph(f, x)
    copy = cg.jit(f, config=dict(capture_sizes=[1], input_binding="copy"))
    auto = cg.jit(f, config=dict(capture_sizes=[1], input_binding="auto"))
    for g in (copy, auto):
        assert np.array_equal(cupy.asnumpy(g(x)), cupy.asnumpy(f(x)))
    owned = OwnedOutput(bare)
    rows = rotated(host_block, {
        "bare graph.launch()": bare.graph.launch,
        "bare memcpy + launch": lambda: bare(x),
        "bare memcpy + launch + owned output": lambda: owned(x),
        "eager CuPy": lambda: f(x),
        "jit copy (input_binding=copy)": lambda: copy(x),
        "jit zero-copy (input_binding=auto)": lambda: auto(x),
        "jit zero-copy, each result kept until the next call": keeper(auto, x),
        "jit zero-copy, 2 inputs alternating": rotating(auto, xs[:2]),
        "jit zero-copy, 4 inputs rotating": rotating(auto, xs),
        "jit copy, 4 inputs rotating": rotating(copy, xs),
    }, reps)
    return {"workload": "one kernel, batch 1, output_mode=copy", "host_us": rows,
            "stats_auto": auto.stats().to_dict()["rebinds_by_argument"]}


def keeper(graphed, *args):
    """A call that keeps its result until the next one (``y = f(x)`` in a loop): the output's
    address then alternates, so the graph's output nodes are re-pointed on every call."""
    kept = [None]

    def call():
        kept[0] = graphed(*args)

    return call


def rotating(graphed, inputs):
    """Calls that take their input from ``inputs`` in turn (a prefetch queue or a data loader's ring)."""
    return in_order(graphed, inputs, list(range(len(inputs))))


def bare_no_copies(fn, x):
    """A hand-captured graph on ``x`` itself: launched, it reads and writes fixed buffers, no copies."""
    from tools.bench_cupy import BareGraph

    graph = BareGraph(fn, x)
    graph.static_in[...] = x
    return graph


def workload_rows(name: str, fn, x, reps: int) -> dict:
    import cupy

    import cupygraph as cg

    bare = bare_no_copies(fn, x)
    auto = cg.jit(fn, config=dict(capture_sizes=[x.shape[0]], input_binding="auto"))
    copy = cg.jit(fn, config=dict(capture_sizes=[x.shape[0]], input_binding="copy"))
    plain = cg.jit(fn, config=dict(capture_sizes=[x.shape[0]], input_binding="auto", pdl="off"))
    want = cupy.asnumpy(fn(x))
    for g in (auto, copy, plain):
        assert np.array_equal(cupy.asnumpy(g(x)), want), name
    # The bare graph has no programmatic edges: "jit auto, pdl off" is its like-for-like row.
    calls = {"bare graph, no copies": bare.graph.launch, "jit auto": lambda: auto(x),
             "jit auto, pdl off": lambda: plain(x), "jit copy": lambda: copy(x)}
    return {
        "workload": f"{name} {list(x.shape)}",
        "latency_us": rotated(latency_block, calls, reps),
        "gpu_us": rotated(gpu_block, calls, reps, rounds=5),
        "host_us": rotated(host_block, calls, reps),
        "stats_auto": auto.stats().to_dict()["rebinds_by_argument"],
        "copies_auto": auto.stats().to_dict()["copies_by_argument"],
    }


def piecewise_rows(reps: int) -> dict:
    import cupy

    import cupygraph as cg
    from tools.bench_cupy import BarePiecewise
    from tools.bench_workloads import Piecewise

    work = Piecewise()
    head, _, tail = work.cupy_pieces()
    w = cupy.asarray(work.params()[0])
    x = cupy.asarray(np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32))
    fn = work.cupy_fn()
    bare = BarePiecewise(head, tail, w, x)
    graphed = cg.jit(fn, config=dict(capture_sizes=[64], mode="PIECEWISE", input_binding="copy"),
                     constant_argnums=(1,))
    bound = cg.jit(fn, config=dict(capture_sizes=[64], mode="PIECEWISE", input_binding="auto"),
                   constant_argnums=(1,))
    for g in (graphed, bound):
        assert np.allclose(cupy.asnumpy(g(x, w)), cupy.asnumpy(fn(x, w)), rtol=1e-5, atol=1e-6)

    def floor() -> None:  # the pieces on fixed buffers, nothing copied: two launches and the matmul
        bare.head.launch()
        bare._matmul(bare.mid, bare.w, out=bare.product)
        bare.tail.launch()

    return {"workload": "piecewise [64, 256] (50 kernels, matmul, 50 kernels)",
            "host_us": rotated(host_block, {
                "bare pieces, no copies (launch, matmul out=, launch)": floor,
                "bare pieces + eager matmul": lambda: bare(x),
                "eager matmul alone": lambda: cupy.matmul(x, w),
                "jit PIECEWISE copy": lambda: graphed(x, w),
                "jit PIECEWISE zero-copy": lambda: bound(x, w)}, reps),
            "stats_auto": bound.stats().to_dict()["rebinds_by_argument"]}


@contextlib.contextmanager
def _copy_reasons():
    """Every 'is copied' debug line meanwhile (why an argument or output was not bound); the
    logger's level and handlers as they were afterwards (tools/bench.py runs other workloads next)."""
    import logging

    found: list = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "is copied" in message:
                found.append(message)

    logger = logging.getLogger("cupygraph")
    handler, level = Collect(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def summary(payload: dict) -> list[str]:
    """One line per figure, for the notes of tools/bench.py's report."""
    lines = [f"{payload['device']}, {payload['date']}"]
    for result in payload["results"]:
        for kind in ("host_us", "latency_us", "gpu_us"):
            for label, value in result.get(kind, {}).items():
                lines.append(f"{result['workload']}: {kind[:-3]} {label}: {value:.2f} us")
        if "error" in result:
            lines.append(f"{result['workload']}: {result['error']}")
    return lines + bench_targets.check_list(payload)


def measure(quick: bool) -> dict:
    """Every row of this benchmark, on device 0."""
    import cupy

    from cupygraph.demo import make_heat_cupy
    from tools.bench_workloads import chain_fn

    cupy.cuda.Device(0).use()
    reps = 500 if quick else 2000
    rng = np.random.default_rng(1)
    with _copy_reasons() as reasons:
        results = [one_kernel(reps * 5)]
        for n in (1024, 65536):
            x = cupy.asarray(rng.standard_normal((n,)).astype(np.float32))
            results.append(workload_rows("chain", chain_fn(100), x, reps))
        for b in (1, 64):
            x = cupy.asarray(rng.standard_normal((b, 128, 128)).astype(np.float32))
            results.append(workload_rows("stencil", make_heat_cupy(steps=32, alpha=0.2), x, reps // 4))
        try:
            results.append(piecewise_rows(reps))
        except Exception as err:  # cuBLAS missing or the like: report and go on
            results.append({"workload": "piecewise", "error": f"{type(err).__name__}: {err}"})
        results += bench_targets.target_results(reps)
    for result in results:
        bench_targets.above_floor(result)
    return {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results,
            "copy_reasons": sorted(set(reasons))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(argv)
    payload = measure(options.quick)
    text = json.dumps(payload, indent=1)
    print(text)
    if options.out:
        options.out.write_text(text)
    print("\n".join(bench_targets.check_list(payload)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
