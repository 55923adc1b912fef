#!/usr/bin/env python3
"""Issue 13's row: the mlp in FULL mode with cupygraph.matmul against torch.cuda.CUDAGraph of the same layers.

The mlp of tools/bench_workloads.py (8 layers of 256 -> 256, float32, tanh-GELU): each layer is
``cupygraph.matmul`` (cuBLAS, no TF32) and one bias + GELU ElementwiseKernel, the whole call one
graph. Against it, PyTorch's documented recipe on ``addmm`` + ``gelu(approximate="tanh")`` (cuBLAS
too; TF32 off). Rows: cupygraph jit with view and with copied outputs, a bare hand-captured CuPy
graph of the same cupygraph.matmul layers (the floor: one input memcpy and one launch), and the
torch graph (one ``copy_`` and one ``replay()``). Each is timed alone in rotated blocks of
consecutive calls (tools/bench_method.py); latency (synchronised calls) and GPU time per call
(events around back-to-back calls) are both reported, with ratios to torch's graph.

Target (issue 13): cupygraph latency <= 1.0x torch's and GPU time within 5 %, at every batch size.

    python3 tools/bench_gemm.py [--quick] [--out bench_gemm.json] [--sizes 1,16,64,256] [--device 0]
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

from tools.bench_cupy import BareGraph
from tools.bench_method import MIN_BLOCK, Schedule, measure
from tools.bench_peers import Frameworks, torch_graph_call
from tools.bench_workloads import HIDDEN, MLP_LAYERS, WORKLOADS, random_inputs

LABELS = {
    "jit-view": "cupygraph jit (view), cupygraph.matmul",
    "jit-unchanged": "cupygraph jit (view), unchanged `x @ W` (routed)",
    "jit-copy": "cupygraph jit (copy), cupygraph.matmul",
    "bare": "bare CuPy graph, cupygraph.matmul",
    "torch-graph": "torch.cuda.CUDAGraph, addmm + gelu",
}
INPUT_SETS = 8
LATENCY_TARGET, GPU_TARGET = 1.0, 0.05


class Row:
    """A competitor as tools/bench_method.measure times it."""

    def __init__(self, key: str, call: Any, inputs: list, fw: Any):
        self.key, self.call, self.inputs, self.fw = key, call, inputs, fw


def cupy_mlp(cupy: Any, unchanged: bool = False) -> Any:
    """``mlp(x, W, B)``: per layer cupygraph.matmul (or, ``unchanged``, CuPy's own ``x @ W`` as a user writes
    it, which jit routes to the same cuBLAS: issue 29), then bias + tanh-GELU in place (one kernel)."""
    import cupygraph as cg

    product = (lambda x, w: x @ w) if unchanged else cg.matmul

    bias_gelu = cupy.ElementwiseKernel(
        "float32 b", "float32 y",
        "float v = y + b; y = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));",
        "bench_gemm_bias_gelu")

    def mlp(x: Any, weights: Any, biases: Any) -> Any:
        for layer in range(weights.shape[0]):
            y = product(x, weights[layer])
            bias_gelu(biases[layer], y)
            x = y
        return x

    return mlp


def build(fws: Frameworks, size: int, params: list[np.ndarray], seed: int) -> tuple[list[Row], dict]:
    import cupygraph as cg

    cupy_fw, torch_fw = fws.get("cupy"), fws.get("torch")
    cupy, torch = cupy_fw.cupy, torch_fw.torch
    host_inputs = random_inputs([(size, HIDDEN)] * INPUT_SETS, seed)
    # The weights stacked: two constant arguments instead of sixteen (each is checked per call).
    weights = cupy.asarray(np.stack(params[0::2]))
    biases = cupy.asarray(np.stack(params[1::2]))
    mlp = cupy_mlp(cupy)
    cupy_inputs = [cupy_fw.upload(a) for a in host_inputs]
    rows = []
    graphs = {}
    for key, mode in (("jit-view", "view"), ("jit-copy", "copy")):
        graphed = cg.jit(mlp, constant_argnums=(1, 2),
                         config={"mode": "FULL", "output_mode": mode, "max_capture_size": max(size, 1)})
        graphs[key] = graphed
        rows.append(Row(key, (lambda g: lambda x: g(x, weights, biases))(graphed), cupy_inputs, cupy_fw))
    plain = cupy_mlp(cupy, unchanged=True)
    graphs["jit-unchanged"] = unchanged = cg.jit(plain, constant_argnums=(1, 2), config={
        "mode": "FULL", "output_mode": "view", "max_capture_size": max(size, 1)})
    rows.append(Row("jit-unchanged", lambda x: unchanged(x, weights, biases), cupy_inputs, cupy_fw))
    bare = BareGraph(lambda x: mlp(x, weights, biases), cupy_inputs[0])
    rows.append(Row("bare", bare, cupy_inputs, cupy_fw))

    torch_inputs = [torch_fw.upload(a) for a in host_inputs]
    model = WORKLOADS["mlp"].torch_fn(torch, [torch_fw.upload(p) for p in params])
    torch_call, _ = torch_graph_call(torch, torch_fw.device, model, torch_inputs[0])

    rows.append(Row("torch-graph", torch_call, torch_inputs, torch_fw))

    # Correct first: every row on the same input, against eager cupygraph and against torch.
    checks: dict[str, Any] = {}
    eager = cupy.asnumpy(mlp(cupy_inputs[1], weights, biases))
    eager_unchanged = cupy.asnumpy(plain(cupy_inputs[1], weights, biases))
    for row in rows:
        got = row.fw.to_numpy(row.call(row.inputs[1]))
        if row.key == "jit-unchanged":  # against CuPy's own eager `x @ W`, bit for bit
            if not np.array_equal(got, eager_unchanged):
                raise RuntimeError("jit of the unchanged code is not bit for bit its eager CuPy run")
            checks[row.key] = (f"bit for bit equal to eager CuPy `x @ W`; max |it - cupygraph.matmul's| = "
                               f"{float(np.max(np.abs(got - eager))):.2e}")
        elif row.key == "torch-graph":
            checks[row.key] = f"max |torch - cupygraph eager| = {float(np.max(np.abs(got - eager))):.2e}"
            if not np.allclose(got, eager, rtol=1e-3, atol=1e-4):
                raise RuntimeError(f"torch's graph disagrees with eager cupygraph: {checks[row.key]}")
        else:
            if not np.array_equal(got, eager):
                raise RuntimeError(f"{row.key} is not bit-for-bit eager cupygraph.matmul")
            checks[row.key] = "bit for bit equal to eager cupygraph"
    for key, graphed in graphs.items():
        stats = graphed.stats()
        if stats.fallbacks:
            raise RuntimeError(f"{key} fell back to eager: {stats.last_detail_by_reason}")
    return rows, checks


def main(argv: Any = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200-call blocks, sizes 1 and 64")
    parser.add_argument("--sizes", default="")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--out", default="")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([1, 64] if args.quick else [1, 16, 64, 256])
    schedule = Schedule(block=MIN_BLOCK, rounds=args.rounds or (3 if args.quick else 7))
    fws = Frameworks(load_torch=True, load_jax=False, index=args.device)
    import cupygraph as cg

    params = WORKLOADS["mlp"].params()
    command = "python3 tools/bench_gemm.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result: dict[str, Any] = {"command": command, "environment": fws.environment(), "schedule": vars(schedule),
                              "sizes": {}, "layers": MLP_LAYERS, "hidden": HIDDEN}
    for size in sizes:
        rows, checks = build(fws, size, params, seed=size)
        summary, errors = measure(rows, schedule, fws.device_sync, pin=fws.pin)
        result["sizes"][str(size)] = {"rows": summary, "errors": errors, "checks": checks}
        fws.release_memory()
    result["binding"] = cg.linalg.binding_info()
    print(report(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def report(result: dict) -> str:
    env = result["environment"]
    lines = [f"{env['card']} · driver {env['driver']} · CUDA {env['cuda_runtime']} · CuPy {env['cupy']} · "
             f"torch {env['torch']} · {env['date']} · cuBLAS binding {result.get('binding', {}).get('binding', '?')}",
             f"command: {result['command']}", "",
             "| batch | competitor | latency µs (IQR) | GPU µs/call | latency / torch | GPU / torch |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for size, entry in result["sizes"].items():
        rows = entry["rows"]
        torch_row = rows.get("torch-graph")
        for key, label in LABELS.items():
            row = rows.get(key)
            if row is None:
                lines.append(f"| {size} | {label} | error: {entry['errors'].get(key, 'missing')} | | | |")
                continue
            lat = row["latency_us"] / torch_row["latency_us"] if torch_row else float("nan")
            gpu = row["gpu_us"] / torch_row["gpu_us"] if torch_row else float("nan")
            lines.append(f"| {size} | {label} | {row['latency_us']:.1f} ({row['latency_iqr_us']:.1f}) | "
                         f"{row['gpu_us']:.1f} | {lat:.2f}x | {gpu:.2f}x |")
            if key == "jit-unchanged" and rows.get("jit-view"):
                base = rows["jit-view"]
                verdicts.append(f"batch {size}: unchanged `x @ W` / cupygraph.matmul: latency "
                                f"{row['latency_us'] / base['latency_us']:.3f}x, "
                                f"GPU time {row['gpu_us'] / base['gpu_us']:.3f}x")
            if key == "jit-view" and torch_row:
                met = lat <= LATENCY_TARGET and gpu <= 1 + GPU_TARGET
                verdicts.append(f"batch {size}: latency {lat:.2f}x torch (target <= {LATENCY_TARGET:.1f}x), GPU time "
                                f"{gpu:.2f}x (target within {GPU_TARGET:.0%}): {'MET' if met else 'MISSED'}")
    return "\n".join([*lines, "", *verdicts])


if __name__ == "__main__":
    main()
