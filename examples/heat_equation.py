"""The heat-equation demo as a user would write it: a RawKernel stepper, jitted, variable batches.

    python examples/heat_equation.py --calls 200

On a GPU each call is one graph replay of 16 RawKernel launches; without one the NumPy version
runs on the host backend (same padding, same statistics; the timings are not GPU timings).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

import cupygraph
from cupygraph.demo import GRID, heat_numpy, make_heat_cupy


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--max-batch", type=int, default=64)
    args = parser.parse_args(argv)

    if cupygraph.gpu_available():
        import cupy

        xp, step = cupy, make_heat_cupy()
    else:
        xp, step = np, heat_numpy
        print("no GPU: running the NumPy stepper on the host backend")
    heat = cupygraph.jit(step, config={"max_capture_size": args.max_batch})
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(args.calls):
        n = int(rng.integers(1, args.max_batch + 1))
        u = xp.asarray(rng.random((n, GRID, GRID), dtype=np.float32))
        diff = float(abs(heat(u) - step(u)).max())
        worst = max(worst, diff)
    stats = heat.stats()
    print(heat.describe())
    print(f"largest difference from eager: {worst}")
    return {"worst": worst, "hit_rate": stats.hit_rate(), "graphs": heat.registry.num_graphs(),
            "calls": stats.calls}


if __name__ == "__main__":
    main()
