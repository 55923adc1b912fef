"""Probe kept beside its log (run from the repository root: python3 benchmarks/runs/<this file>): per-layer GPU time of cuBLASLt / cuBLAS variants for the mlp layer."""
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import cupy
cupy.cuda.Device(0).use()
import cupygraph as cg
from cupygraph.linalg import _lt_tuning
from tools.bench_cupy import BareGraph

variant, cands = sys.argv[1], int(sys.argv[2])
_lt_tuning.CANDIDATES = cands
rng = np.random.default_rng(0)
W = [cupy.asarray(rng.standard_normal((1024, 1024)).astype(np.float32) * 0.04) for _ in range(4)]
Wt = [cupy.ascontiguousarray(w.T) for w in W]  # [out, in]
B = [cupy.asarray(rng.standard_normal(1024).astype(np.float32) * 0.1) for _ in range(4)]

def layer(x, i):
    if variant == "ltN":
        return cg.linalg.linear(x, W[i], B[i], activation="relu")
    if variant == "ltT":
        return cg.linalg.linear(x, Wt[i].T, B[i], activation="relu")
    if variant == "gemmN":
        return cg.matmul(x, W[i])
    if variant == "gemmT":
        return cg.matmul(x, Wt[i].T)
    if variant == "ltNnobias":
        return cg.linalg.linear(x, W[i])
    raise SystemExit(variant)

def mlp(x):
    for i in range(4):
        x = layer(x, i)
    return x

stream = cupy.cuda.Stream(non_blocking=True)
for batch in (1, 2, 4, 16, 64):
    x = cupy.asarray(rng.standard_normal((batch, 1024)).astype(np.float32))
    g = BareGraph(mlp, x)
    with g._stream:
        for _ in range(50): g.graph.launch(g._stream)
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        ts = []
        for r in range(5):
            e0.record(g._stream)
            for _ in range(300): g.graph.launch(g._stream)
            e1.record(g._stream); e1.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(e0, e1) / 300 * 1e3)
    print(f"{variant} cands={cands} batch={batch}: graph GPU {np.median(ts):.2f} us/call, {np.median(ts)/4:.2f} per layer")
for p in cg.linalg.gemm_plans():
    print("  plan", p["n"], p["m"], p["k"], p["trans_a"], p["trans_b"], p["epilogue"], p["proposals"], p["chosen"], p["microseconds"])
