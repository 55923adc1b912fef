#!/usr/bin/env python3
"""Issue 31's benchmark: the mlp on cupygraph's cuBLAS path against PyTorch's graph, torch.compile and XLA.

The workload is the mlp of tools/bench_workloads.py: 4 layers of 1024 -> 1024, float32, bias + ReLU,
the same weights and inputs for every framework, TF32 off everywhere. Rows:

* ``jit-copy``: cupygraph ``jit``, FULL, default config (copied outputs); each layer one
  ``cupygraph.linalg.linear(x, w, b, activation="relu")``, a cuBLASLt GEMM with the bias + ReLU
  epilogue fused, on the fastest of cuBLASLt's proposals for that batch (timed once per shape).
* ``jit-view``: the same with ``output_mode="view"``.
* ``bare``: the same layers hand-captured into one CuPy graph (one input copy, one launch): the floor.
* ``jit-matmul``: ``jit`` of ``cupygraph.matmul`` (cublasGemmEx) + a bias + ReLU ElementwiseKernel
  per layer: the route before issue 31, for what the fused epilogue and cuBLASLt's choice save.
* ``jit-unchanged``: ``jit`` of unchanged CuPy, ``cupy.maximum(x @ w + b, 0)`` (``x @ w`` routed to
  cuBLAS, issue 29; the adds and the maximum are CuPy kernels).
* ``torch-graph``: ``torch.cuda.CUDAGraph`` of addmm + relu (PyTorch's documented recipe);
  ``torch-compile``: ``torch.compile(mode="reduce-overhead")``; ``jax``: ``jax.jit`` (precision HIGHEST).

Every framework is pinned to one device. Each row is checked first (cupygraph's against their own
eager function bit for bit; torch's and JAX's against eager cupygraph within the workload's
tolerance), then timed alone in rotated blocks of consecutive calls (tools/bench_method.py):
latency (synchronised calls) and GPU time per call (events around back-to-back calls; JAX's is an
upper bound from the host clock). A framework that is missing or fails makes error rows, with the
reason, and the rest runs.

Targets (issue 31): ``jit-copy`` latency and GPU time ≤ 1.0× ``torch-graph`` at batch 1, 16, 64, 256.

    python3 tools/bench_gemm.py [--quick] [--out bench_gemm.json] [--sizes 1,16,64,256] [--device 0]
                                [--skip jax,torch-compile,...]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.bench import Case, check
from tools.bench_cupy import BareGraph
from tools.bench_headline import peer_wins
from tools.bench_method import MIN_BLOCK, Schedule, measure
from tools.bench_peers import Competitor, Frameworks, peer_builders
from tools.bench_workloads import MLP_LAYERS, MLP_WIDTH, WORKLOADS

LABELS = {
    "jit-copy": "cupygraph jit (copy, default config), linalg.linear: cuBLASLt + bias/ReLU epilogue",
    "jit-view": "cupygraph jit (view), linalg.linear",
    "bare": "bare CuPy graph, linalg.linear",
    "jit-matmul": "cupygraph jit (copy), cupygraph.matmul (cublasGemmEx) + bias/ReLU kernel",
    "jit-unchanged": "cupygraph jit (copy), unchanged CuPy maximum(x @ W + b, 0)",
    "torch-graph": "torch.cuda.CUDAGraph, addmm + relu",
    "torch-compile": "torch.compile (reduce-overhead)",
    "jax": "jax.jit",
}
PEERS = ("torch-graph", "torch-compile", "jax")
REFERENCE = "torch-graph"
OURS = "jit-copy"
INPUT_SETS = 8
SETUP_CALLS = 3  # torch.compile records its graph on the third call
LATENCY_TARGET = GPU_TARGET = 1.0


def cupy_variants(cupy: Any) -> dict[str, Any]:
    """The cupygraph rows' functions ``mlp(x, *params)``: fused (linalg.linear), matmul + kernel, unchanged CuPy."""
    import cupygraph as cg

    bias_relu = cupy.ElementwiseKernel("float32 b", "float32 y", "float v = y + b; y = v > 0.0f ? v : 0.0f;",
                                       "bench_gemm_bias_relu")

    def matmul_kernel(x: Any, *params: Any) -> Any:
        for w, b in zip(params[0::2], params[1::2]):
            x = cg.matmul(x, w)
            bias_relu(b, x)
        return x

    def unchanged(x: Any, *params: Any) -> Any:
        for w, b in zip(params[0::2], params[1::2]):
            x = cupy.maximum(x @ w + b, 0)
        return x

    return {"fused": WORKLOADS["mlp"].cupy_fn(), "matmul": matmul_kernel, "unchanged": unchanged}


def cupy_rows(case: Case) -> list[tuple[Competitor, Any]]:
    """(competitor, its eager function) for every cupygraph row."""
    import cupygraph as cg

    fw = case.frameworks.get("cupy")
    params = case.cupy_params
    fns = cupy_variants(fw.cupy)
    consts = tuple(range(1, 1 + len(params)))
    rows = []
    for key, fn, config in (("jit-copy", fns["fused"], {"mode": "FULL"}),
                            ("jit-view", fns["fused"], {"mode": "FULL", "output_mode": "view"}),
                            ("jit-matmul", fns["matmul"], {"mode": "FULL"}),
                            ("jit-unchanged", fns["unchanged"], {"mode": "FULL"})):
        graphed = cg.jit(fn, constant_argnums=consts, config=config)

        def note(g: Any = graphed) -> str:
            stats = g.stats()
            return f"fallbacks: {dict(stats.last_detail_by_reason)}" if stats.fallbacks else ""

        rows.append((Competitor(key, (lambda g: lambda x: g(x, *params))(graphed), case.cupy_inputs, fw, exact=True,
                                note=note), fn))
    bare = BareGraph(lambda x: fns["fused"](x, *params), case.cupy_inputs[0])
    rows.append((Competitor("bare", bare, case.cupy_inputs, fw, exact=True), fns["fused"]))
    return rows


def run_size(fws: Frameworks, size: int, skip: set[str], schedule: Schedule) -> dict[str, Any]:
    workload = WORKLOADS["mlp"]
    case = Case(workload, size, [workload.shape(size)] * INPUT_SETS, seed=size, frameworks=fws)
    ready: list[Competitor] = []
    errors: dict[str, str] = {}
    checks: dict[str, str] = {}
    fused_refs = [fws.get("cupy").to_numpy(case.eager(x, *case.cupy_params)) for x in case.cupy_inputs[:2]]
    built: list[tuple[Competitor, list[np.ndarray]]] = []
    try:
        for c, fn in cupy_rows(case):
            if c.key in skip:
                errors[c.key] = "skipped (--skip)"
                continue
            built.append((c, [fws.get("cupy").to_numpy(fn(x, *case.cupy_params)) for x in case.cupy_inputs[:2]]))
    except Exception as err:  # cupygraph itself failed: the size has nothing to compare
        errors["cupygraph"] = f"{type(err).__name__}: {err}"
    for key in PEERS:
        if key in skip:
            errors[key] = "skipped (--skip)"
            continue
        try:
            built.append((peer_builders()[key](case, False), fused_refs))
        except Exception as err:
            errors[key] = f"{type(err).__name__}: {err}"
    for c, refs in built:
        try:
            for _ in range(SETUP_CALLS):
                c.fw.finish(c.call(c.inputs[0]))
            # The second input first: a graph that wrote nothing would still hold the first input's result.
            worst = check(c, [c.inputs[1], c.inputs[0]], [refs[1], refs[0]], workload)
            checks[c.key] = "bit for bit equal to its eager function" if c.exact else (
                f"max |it - eager cupygraph| = {worst:.2e} ({workload.tolerance()})")
            ready.append(c)
        except Exception as err:
            errors[c.key] = f"{type(err).__name__}: {err}"
    fws.device_sync()
    summary, timing_errors = measure(ready, schedule, fws.device_sync, pin=fws.pin)
    errors.update(timing_errors)
    notes = {c.key: c.note() for c in ready if c.note()}
    del case
    fws.release_memory()
    return {"rows": summary, "errors": errors, "checks": checks, "notes": notes}


def parse_args(argv: Any = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200-call blocks, batches 1 and 64")
    parser.add_argument("--sizes", default="", help="comma-separated batches (default 1,16,64,256)")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--skip", default="", help=f"rows to leave out, of {','.join(LABELS)}")
    parser.add_argument("--out", default="")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = {k for k in args.skip.split(",") if k} - set(LABELS)
    if unknown:
        parser.error(f"--skip: unknown rows {sorted(unknown)}; valid: {', '.join(LABELS)}")
    return args


def main(argv: Any = None) -> dict:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([1, 64] if args.quick else [1, 16, 64, 256])
    schedule = Schedule(block=MIN_BLOCK, rounds=args.rounds or (3 if args.quick else 7))
    skip = {k for k in args.skip.split(",") if k}
    fws = Frameworks(load_torch=not {"torch-graph", "torch-compile"} <= skip, load_jax="jax" not in skip,
                     index=args.device)
    import cupygraph as cg

    command = "python3 tools/bench_gemm.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result: dict[str, Any] = {"command": command, "environment": fws.environment(), "schedule": vars(schedule),
                              "layers": MLP_LAYERS, "width": MLP_WIDTH, "sizes": {}}
    for size in sizes:
        result["sizes"][str(size)] = run_size(fws, size, skip, schedule)
    try:
        result["binding"] = cg.linalg.binding_info()
    except Exception as err:  # the figures stand without it; say why it is missing
        result["binding"] = {"error": f"{type(err).__name__}: {err}"}
    result["gemm_plans"] = cg.linalg.gemm_plans()
    print(report(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def _rows(result: dict) -> list[dict]:
    """Every timed row as tools/bench_headline reads rows."""
    out = []
    for size, entry in result["sizes"].items():
        for key, row in entry["rows"].items():
            out.append(dict(row, workload="mlp", axis="batch", size=int(size), key=key, competitor=LABELS[key]))
    return out


def report(result: dict) -> str:
    env = result["environment"]
    binding = result.get("binding", {})
    lines = [f"{env.get('card')} · driver {env.get('driver')} · CUDA {env.get('cuda_runtime')} · CuPy "
             f"{env.get('cupy')} · torch {env.get('torch')} · jax {env.get('jax')} · {env.get('date')} · cuBLAS "
             f"binding {binding.get('binding', '?')}, cuBLASLt {binding.get('lt_version', '?')}",
             f"command: {result['command']}",
             f"workload: {result['layers']} layers of {result['width']} -> {result['width']}, float32, bias + ReLU",
             "", f"| batch | competitor | latency µs (IQR) | GPU µs/call | latency / {REFERENCE} | GPU / {REFERENCE} |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for size, entry in result["sizes"].items():
        rows, reference = entry["rows"], entry["rows"].get(REFERENCE)
        for key, label in LABELS.items():
            row = rows.get(key)
            if row is None:
                why = entry["errors"].get(key) or entry["errors"].get("cupygraph", "?")
                lines.append(f"| {size} | {label} | not run: {why} | | | |")
                continue
            lat = row["latency_us"] / reference["latency_us"] if reference else float("nan")
            gpu = row["gpu_us"] / reference["gpu_us"] if reference else float("nan")
            lines.append(f"| {size} | {label} | {row['latency_us']:.1f} ({row['latency_iqr_us']:.1f}) | "
                         f"{row['gpu_us']:.1f} | {lat:.2f}x | {gpu:.2f}x |")
            if key == OURS and reference:
                met = lat <= LATENCY_TARGET and gpu <= GPU_TARGET
                verdicts.append(f"batch {size}: latency {lat:.3f}x {REFERENCE} (target <= {LATENCY_TARGET:.1f}x), "
                                f"GPU time {gpu:.3f}x (target <= {GPU_TARGET:.1f}x): {'MET' if met else 'MISSED'}")
        verdicts += [f"batch {size}: {key}: {note}" for key, note in entry.get("notes", {}).items()]
    wins = peer_wins(_rows(result), peers=PEERS)
    unfused = [p for p in result.get("gemm_plans", []) if not p["fused"]]
    tail = [f"Where a peer wins: {w}" for w in wins] or ["No peer beats cupygraph jit (copy) in this run."]
    if unfused:
        tail.append(f"GEMMs cuBLASLt ran unfused: {unfused}")
    return "\n".join([*lines, "", *verdicts, "", *tail])


if __name__ == "__main__":
    main()
