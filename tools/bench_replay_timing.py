"""What replay timing (CUDA events every Nth replay) and NVTX ranges cost on the jit hot path.

One small function (one RawKernel launch), one process, one GPU: the host time per call of the
fast path, for replay_timing_every 0 (off), 64, 16 and 1, and with NVTX ranges on. Rounds are
interleaved (each variant timed once per round) and the median per call is reported.

    python tools/bench_replay_timing.py [--calls 3000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> int:
    import cupy

    import cupygraph as cg

    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    kernel = cupy.RawKernel(r"""
    extern "C" __global__ void twice(const float* x, float* y, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }""", "twice")

    def fn(x):
        y = cupy.empty_like(x)
        kernel(((x.size + 255) // 256,), (256,), (x, y, np.int64(x.size)))
        return y

    base = dict(backend="cupy", capture_sizes=[8])
    variants = {"off": dict(base), "every 64": dict(base, replay_timing_every=64),
                "every 16": dict(base, replay_timing_every=16), "every 1": dict(base, replay_timing_every=1),
                "nvtx": dict(base, nvtx=True)}
    with cupy.cuda.Device(0):
        x = cupy.asarray(np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32))
        fns = {}
        for name, config in variants.items():
            try:
                fns[name] = cg.jit(fn, config=config)
            except Exception as err:  # nvtx missing: say so, time the rest
                print(f"{name}: not timed ({err})")
                continue
            for _ in range(200):
                fns[name](x)
        cupy.cuda.Device(0).synchronize()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, f in fns.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    f(x)
                cupy.cuda.Device(0).synchronize()
                times[name].append((time.perf_counter() - start) / args.calls)
        off = statistics.median(times["off"])
        print(f"{'variant':<10} {'us/call':>8} {'vs off':>8}")
        for name, samples in times.items():
            med = statistics.median(samples)
            print(f"{name:<10} {med * 1e6:>8.2f} {med / off:>7.3f}x")
        sampled = fns.get("every 1")
        if sampled is not None:
            (entry,) = sampled.registry.entries()
            print(f"device replay time (every 1): {entry.timing.replay_s() * 1e6:.2f} us over "
                  f"{entry.timing.replay_samples} samples")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
