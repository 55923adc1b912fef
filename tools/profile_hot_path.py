#!/usr/bin/env python3
"""Where the per-call host time of a cupygraph replay goes, op by op (GPU machine only)."""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cupy

import cupygraph as cg
from tools.bench_cupy import BareGraph
from tools.bench_workloads import chain_fn


def per_op(label: str, fn, reps: int = 20000) -> None:
    for _ in range(100):
        fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    took = (time.perf_counter() - start) / reps * 1e6
    cupy.cuda.Device().synchronize()
    print(f"{label:<40} {took:8.3f} us")


def main() -> None:
    cupy.cuda.Device(0).use()  # pinned, as tools/bench.py is
    x = cupy.asarray(np.random.default_rng(0).standard_normal(1024).astype(np.float32))
    fn = chain_fn(100)
    bare = BareGraph(fn, x)
    view = cg.jit(fn, config=dict(capture_sizes=[1024], output_mode="view"))
    copy = cg.jit(fn, config=dict(capture_sizes=[1024]))
    view(x), copy(x)
    stream = cupy.cuda.get_current_stream()
    rt = cupy.cuda.runtime
    per_op("get_current_stream()", cupy.cuda.get_current_stream, 100000)
    per_op("x.flags.c_contiguous", lambda: x.flags.c_contiguous, 100000)
    per_op("x._c_contiguous", lambda: getattr(x, "_c_contiguous", None), 100000)
    per_op("x.shape, x.dtype", lambda: (x.shape, x.dtype), 100000)
    per_op("x.data.ptr", lambda: x.data.ptr, 100000)
    per_op("x.nbytes", lambda: x.nbytes, 100000)
    per_op("memcpyAsync 4KB", lambda: rt.memcpyAsync(bare.static_in.data.ptr, x.data.ptr, x.nbytes, 4, stream.ptr))
    per_op("cupy.empty((1024,), f32)", lambda: cupy.empty((1024,), np.float32))
    per_op("graph.launch()", bare.graph.launch, 5000)
    per_op("graph.launch(stream)", lambda: bare.graph.launch(stream), 5000)
    per_op("bare graph call", lambda: bare(x), 5000)
    per_op("cupygraph view call", lambda: view(x), 5000)
    per_op("cupygraph copy call", lambda: copy(x), 5000)
    per_op("time.perf_counter()", time.perf_counter, 100000)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(5000):
        copy(x)
    profile.disable()
    cupy.cuda.Device().synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    print(text.getvalue())


if __name__ == "__main__":
    main()
