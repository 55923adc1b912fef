"""Probe kept beside its log (run from the repository root: python3 benchmarks/runs/<this file>): chain-rawmodule jit copy vs view — latency, host, GPU, stats."""
import json, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import cupy
cupy.cuda.Device(0).use()
import cupygraph as cg
from tools.bench_workloads import raw_chain_fn

fn = raw_chain_fn(100)
xs = [cupy.asarray(np.random.default_rng(i).standard_normal(1024).astype(np.float32)) for i in range(2)]
want = [cupy.asnumpy(fn(x)) for x in xs]
variants = {}
for mode in ("copy", "view"):
    for pdl in ("auto", "off"):
        kw = dict(output_mode=mode, capture_sizes=[1024])
        if pdl == "off":
            kw["pdl"] = "off"
        j = cg.jit(fn, config=kw)
        for i in (1, 0, 1, 0):
            got = cupy.asnumpy(j(xs[i]))
            assert np.array_equal(got, want[i]), (mode, pdl)
        variants[f"{mode}-{pdl}"] = j
stream = cupy.cuda.get_current_stream()
res = {k: {"lat": [], "host": [], "gpu": []} for k in variants}
N = 300
keys = list(variants)
for r in range(9):
    order = keys[r % len(keys):] + keys[:r % len(keys)]
    for k in order:
        j = variants[k]
        for _ in range(20): j(xs[0])
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            j(xs[0]); stream.synchronize()
        res[k]["lat"].append((time.perf_counter() - t0) / N * 1e6)
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        stream.synchronize()
        t0 = time.perf_counter()
        e0.record(stream)
        for _ in range(N):
            j(xs[0])
        t1 = time.perf_counter()
        e1.record(stream); e1.synchronize()
        res[k]["host"].append((t1 - t0) / N * 1e6)
        res[k]["gpu"].append(cupy.cuda.get_elapsed_time(e0, e1) / N * 1e3)
for k, v in res.items():
    print(k, {m: round(float(np.median(x)), 2) for m, x in v.items()})
for k, j in variants.items():
    s = j.stats()
    d = s.model_dump() if hasattr(s, "model_dump") else (s._asdict() if hasattr(s, "_asdict") else vars(s))
    print("STATS", k, json.dumps(d, default=str)[:3000])
