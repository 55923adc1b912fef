"""Probe kept beside its log (run from the repository root: python3 benchmarks/runs/<this file>): where the mlp's copy-mode host time goes."""
import cProfile, io, json, pstats, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import cupy
cupy.cuda.Device(0).use()
import cupygraph as cg
from tools.bench_workloads import mlp_fn, mlp_params

fn = mlp_fn()
params = [cupy.asarray(p) for p in mlp_params()]
consts = tuple(range(1, 1 + len(params)))
stream = cupy.cuda.get_current_stream()
for batch in (1, 64):
    xs = [cupy.asarray(np.random.default_rng(i).standard_normal((batch, 1024)).astype(np.float32)) for i in range(2)]
    for mode in ("copy", "view"):
        g = cg.jit(fn, constant_argnums=consts, config={"mode": "FULL", "output_mode": mode})
        for i in range(30):
            out = g(xs[i % 2], *params)
        assert np.array_equal(cupy.asnumpy(g(xs[0], *params)), cupy.asnumpy(fn(xs[0], *params)))
        stream.synchronize()
        hosts = []
        for r in range(20):
            stream.synchronize()
            t0 = time.perf_counter()
            for j in range(20):
                out = g(xs[j % 2], *params)
            hosts.append((time.perf_counter() - t0) / 20 * 1e6)
            stream.synchronize()
        print(f"batch {batch} {mode}: host µs/call (20-call blocks, queue never full) median {np.median(hosts):.2f}")
        pr = cProfile.Profile()
        pr.enable()
        for j in range(200):
            out = g(xs[j % 2], *params)
            if j % 20 == 19:
                stream.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
        print(s.getvalue()[:3500])
        st = g.stats()
        print("STATS", json.dumps({k: v for k, v in st.to_dict().items() if k != "graph_costs"}, default=str)[:2500])
