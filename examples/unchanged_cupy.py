"""CuPy code as you already write it, graphed unchanged: `x @ W`, `einsum`, reductions (issue 29).

    python examples/unchanged_cupy.py --calls 100

The function below is plain CuPy, with no cupygraph call inside. CuPy itself refuses cuBLAS on a
capturing stream, so before issue 29 its products made every batch size run eagerly with a hint to
rewrite them for ``cupygraph.matmul``. ``jit`` now routes them, while it warms up and captures, to
the same cuBLAS routines CuPy calls, on a handle that captures (docs/ROUTING.md): one graph per batch
size, and every call that replays a graph equals eager CuPy on the same (padded) rows bit for bit.
Without a GPU the same code runs NumPy on the host backend, which lets the same calls through.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

import cupygraph

FEATURES, HIDDEN, CLASSES = 64, 128, 10


def make_pipeline(xp: Any) -> Any:
    """A scoring step as a CuPy (or NumPy) user writes it."""

    def score(x: Any, w1: Any, w2: Any) -> Any:
        h = xp.tanh(x @ w1)
        logits = xp.einsum("bh,hc->bc", h, w2)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = xp.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    return score


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--backend", choices=("auto", "cupy", "host"), default="auto")
    args = parser.parse_args(argv)

    on_gpu = args.backend == "cupy" or (args.backend == "auto" and cupygraph.gpu_available())
    if on_gpu:
        import cupy as xp
    else:
        xp = np
        print("running the NumPy version on the host backend")
    rng = np.random.default_rng(7)
    w1 = xp.asarray((rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32))
    w2 = xp.asarray((rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32))
    score = make_pipeline(xp)
    graphed = cupygraph.jit(score, constant_argnums=(1, 2),
                            config={"mode": "FULL", "max_capture_size": args.max_batch,
                                    "backend": "cupy" if on_gpu else "host"})
    worst = 0.0
    for _ in range(args.calls):
        n = int(rng.integers(1, args.max_batch + 1))
        x = xp.asarray(rng.standard_normal((n, FEATURES)).astype(np.float32))
        hits = graphed.stats().hits
        got = graphed(x, w1, w2)
        if graphed.stats().hits > hits:  # a replay: eager CuPy on the same padded rows, bit for bit
            padded = xp.zeros((graphed.config.get_padded_batch_size(n), FEATURES), dtype=np.float32)
            padded[:n] = x
            want = score(padded, w1, w2)[:n]
        else:  # the call that captured its key ran the function as it is
            want = score(x, w1, w2)
        worst = max(worst, float(abs(got - want).max()))
    stats = graphed.stats()
    print(graphed.describe())
    print(f"largest difference from eager CuPy (padded rows for replays): {worst}; fallbacks: {stats.fallbacks}")
    return {"worst": worst, "fallbacks": stats.fallbacks, "graphs": graphed.registry.num_graphs(),
            "routed": dict(stats.routed_calls), "hit_rate": stats.hit_rate()}


if __name__ == "__main__":
    main()
