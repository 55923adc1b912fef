"""A serving-style loop: variable batches of requests, FULL_AND_PIECEWISE, like vLLM's runner.

Decode steps (every request adds one token: a uniform batch) replay one FULL graph; prefill and
mixed steps replay the PIECEWISE sequence, whose matmul runs eagerly between two graph pieces
(cuBLAS cannot be captured by CuPy). The descriptor says which kind of batch a step is.

    python examples/serving_loop.py --steps 300
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

import cupygraph

HIDDEN = 64


def make_model(xp: Any, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    weight = xp.asarray(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / np.sqrt(HIDDEN))
    matmul = cupygraph.graph_break(xp.matmul)

    def step(tokens: Any, weight: Any, decode: bool) -> Any:
        h = xp.tanh(tokens * 0.5 + 0.1)   # captured in every mode
        h = matmul(h, weight)              # eager between pieces in PIECEWISE mode
        return h / (1.0 + xp.abs(h))       # captured

    return step, weight


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--config", default=None, help="config file (default: configs/serving.yaml settings)")
    args = parser.parse_args(argv)

    gpu = cupygraph.gpu_available()
    if gpu:
        import cupy as xp
    else:
        xp = np
        print("no GPU: running on the host backend")
    step, weight = make_model(xp)
    config: Any = args.config or {"mode": "FULL_AND_PIECEWISE", "max_capture_size": 128, "max_num_reqs": 128}
    serve = cupygraph.jit(
        step, config=config, constant_argnums=(1,),
        descriptor_fn=lambda tokens, weight, decode: cupygraph.BatchDescriptor(
            tokens.shape[0], num_reqs=tokens.shape[0] if decode else None, uniform_decode=decode),
    )
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(args.steps):
        decode = bool(rng.random() < 0.7)
        n = int(rng.integers(1, 129))
        tokens = xp.asarray(rng.standard_normal((n, HIDDEN)).astype(np.float32))
        got, want = serve(tokens, weight, decode), step(tokens, weight, decode)
        worst = max(worst, float(abs(got - want).max()))
    stats = serve.stats()
    print(serve.describe())
    print(f"largest difference from eager: {worst:.3g}")
    return {"worst": worst, "replays_by_mode": dict(stats.replays_by_mode), "fallbacks": stats.fallbacks,
            "calls": stats.calls}


if __name__ == "__main__":
    main()
