#!/usr/bin/env python3
"""Programmatic dependent launch (issue 18): GPU time and launch host cost, PDL against plain.

One process, one card: the benchmark's 100-kernel chain (cupygraph's opted-in ``affine``/``squash``)
captured by ``CupyBackend`` with ``pdl="auto"`` and ``pdl="off"``; GPU time per launch from CUDA
events over blocks of launches (medians of rounds, alternating), and host time per ``launch()``
call for CuPy's own ``Graph`` (plain), the same class with the PDL executable swapped in, and the
``PdlGraph`` wrapper used when it cannot be swapped. Prints one JSON object.

    python3 tools/probe_pdl.py [--n 1024] [--length 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    import cupy
    import numpy as np

    from cupygraph.backends import pdl as pdl_backend
    from cupygraph.backends.cupy import CupyBackend
    from tools.bench_workloads import chain_fn

    cupy.cuda.Device(0).use()
    chain = chain_fn(args.length)
    backend = CupyBackend(0)
    x = cupy.asarray(np.random.default_rng(0).standard_normal(args.n).astype(np.float32))
    want = cupy.asnumpy(chain(x))
    recordings = {}
    for setting in ("auto", "off"):
        recordings[setting] = backend.capture(chain, [x], {}, num_warmups=1, capture_mode="relaxed",
                                              gc_freeze=True, pdl=setting)
    swap = pdl_backend._swap_exec
    pdl_backend._swap_exec = lambda graph, new, drv: False  # the wrapper path
    try:
        recordings["wrapper"] = backend.capture(chain, [x], {}, num_warmups=0, capture_mode="relaxed",
                                                gc_freeze=True, pdl="auto")
    finally:
        pdl_backend._swap_exec = swap
    result: dict = dict(device=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), n=args.n,
                        length=args.length, cupy=cupy.__version__,
                        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for name, rec in recordings.items():
        result[f"{name}_converted"] = rec.pdl.converted if rec.pdl else None
        result[f"{name}_step_type"] = type(rec.steps[0]).__name__
        rec.launch()
        got = cupy.asnumpy(rec.outputs)
        result[f"{name}_bit_identical"] = bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
    stream = cupy.cuda.get_current_stream()
    block = 200
    gpu: dict = {k: [] for k in recordings}
    host: dict = {k: [] for k in recordings}
    for _ in range(args.rounds):
        for name, rec in recordings.items():
            launch = rec.launch
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            stream.synchronize()
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(block):
                launch()
            t1 = time.perf_counter()
            end.record(stream)
            end.synchronize()
            gpu[name].append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / block)
            host[name].append((t1 - t0) * 1e6 / block)
    for name in recordings:
        result[f"{name}_gpu_us_per_launch"] = round(statistics.median(gpu[name]), 2)
        result[f"{name}_host_us_per_launch"] = round(statistics.median(host[name]), 3)
    result["gpu_ratio_pdl_to_plain"] = round(result["auto_gpu_us_per_launch"] / result["off_gpu_us_per_launch"], 3)
    # Host cost alone: a launch call on a graph of 2 kernels, the queue kept short.
    tiny = chain_fn(2)
    small = {s: backend.capture(tiny, [x], {}, num_warmups=0, capture_mode="relaxed", gc_freeze=True, pdl=s)
             for s in ("auto", "off")}
    pdl_backend._swap_exec = lambda graph, new, drv: False
    try:
        small["wrapper"] = backend.capture(tiny, [x], {}, num_warmups=0, capture_mode="relaxed", gc_freeze=True,
                                           pdl="auto")
    finally:
        pdl_backend._swap_exec = swap
    launches: dict = {k: [] for k in small}
    for _ in range(args.rounds * 3):
        for name, rec in small.items():
            launch = rec.launch
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                launch()
            launches[name].append((time.perf_counter() - t0) * 1e4)
    for name in small:
        result[f"tiny_{name}_host_us_per_launch"] = round(statistics.median(launches[name]), 3)
        result[f"tiny_{name}_converted"] = small[name].pdl.converted if small[name].pdl else None
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
