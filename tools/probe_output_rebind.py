"""Probe for issue 14: zero-copy outputs re-pointed on every back-to-back call.

In the 2026-11-26 H100 A/B, ``jit`` under ``output_mode="copy"`` issued 34-139 µs of host time per
call back to back while its latency with the device idle was fine: re-pointing the output node of
an executable whose previous launch still ran waited for it (52 µs per call in this probe). Fixed
the same day by two executables taking turns (``backends/cupy_banks.py``); the probe stays to show
it. It times one jitted chain back to back under four caller patterns, each alone in its own block:

* ``view``          output_mode="view" (no output node is re-pointed): the floor;
* ``drop``          copy mode, the result dropped at once (the same buffer can come back);
* ``keep-last``     copy mode, the last result held (as ``out = f(x)`` does): buffers alternate;
* ``copy-binding``  copy mode with input_binding="copy" (outputs copied, nothing re-pointed).

Host µs per call (the loop, no sync inside) and GPU µs per call (events around the block).
Usage on the GPU machine: ``python3 tools/probe_output_rebind.py [--n 1024] [--calls 400]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="elements per row of the chain's input")
    parser.add_argument("--calls", type=int, default=400, help="calls per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per pattern (rotated)")
    args = parser.parse_args()

    import cupy

    import cupygraph as cg

    cupy.cuda.Device(0).use()

    def chain(x):
        for _ in range(20):
            x = cupy.sin(x) * 0.5 + x
        return x

    x = cupy.random.default_rng(0).standard_normal((1, args.n), dtype=cupy.float32)
    functions = {
        "view": cg.jit(chain, config=dict(capture_sizes=[1], output_mode="view")),
        "drop": cg.jit(chain, config=dict(capture_sizes=[1])),
        "keep-last": cg.jit(chain, config=dict(capture_sizes=[1])),
        "copy-binding": cg.jit(chain, config=dict(capture_sizes=[1], input_binding="copy")),
    }
    want = chain(x)
    for name, f in functions.items():
        for _ in range(3):
            assert bool((f(x) == want).all()), name  # captured and right before timing

    def block(name: str) -> tuple[float, float]:
        f = functions[name]
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        cupy.cuda.get_current_stream().synchronize()
        start.record()
        t0 = time.perf_counter()
        out = None
        for _ in range(args.calls):
            if name == "keep-last":
                out = f(x)
            else:
                f(x)
        host = (time.perf_counter() - t0) / args.calls * 1e6
        end.record()
        end.synchronize()
        del out
        return host, cupy.cuda.get_elapsed_time(start, end) * 1e3 / args.calls

    results: dict[str, list[tuple[float, float]]] = {name: [] for name in functions}
    names = list(functions)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            results[name].append(block(name))
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, n={args.n}, {args.calls} calls x "
          f"{args.rounds} blocks; medians")
    for name, rows in results.items():
        host = statistics.median(h for h, _ in rows)
        gpu = statistics.median(g for _, g in rows)
        stats = functions[name].stats()
        binders = [e.binding for e in functions[name].registry.entries() if e.binding is not None]
        banks = [(b.banks, b.node_updates) for b in binders]
        print(f"{name:>13}: host {host:8.2f} us/call, gpu {gpu:8.2f} us/call, "
              f"rebinds {dict(stats.rebinds_by_argument)}, (executables, node updates) {banks}")


if __name__ == "__main__":
    main()
