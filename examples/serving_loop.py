"""A serving-style loop: variable batches of requests, FULL_AND_PIECEWISE, like vLLM's runner.

Decode steps (every request adds one token: a uniform batch) replay one FULL graph, their layer a
custom RawKernel; prefill and mixed steps replay the PIECEWISE sequence, whose cuBLAS matmul runs
eagerly between two graph pieces (CuPy cannot capture cuBLAS). The descriptor says which kind of
batch a step is.

    python examples/serving_loop.py --steps 300
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

import cupygraph

HIDDEN = 64


def gelu(xp: Any, v: Any) -> Any:
    return 0.5 * v * (1.0 + xp.tanh(np.float32(0.7978845608028654) * (v + np.float32(0.044715) * v * v * v)))


def make_linear_gelu(xp: Any) -> Callable[[Any, Any, Any], Any]:
    """gelu(x @ w + b) as one custom kernel: capturable, so decode steps get one FULL graph."""
    if xp is np:
        # The host stand-in for the kernel: element-wise products and a sum, which the host
        # backend captures (it refuses `@`, as CuPy refuses cuBLAS under capture).
        return lambda x, w, b: gelu(np, (x[:, :, None] * w).sum(axis=1) + b)
    from cupygraph.kernels import get_kernel

    kernel = get_kernel("mlp.cu", "linear_gelu")

    def linear_gelu(x: Any, w: Any, b: Any) -> Any:
        m, (k, n) = x.shape[0], w.shape
        y = xp.empty((m, n), dtype=np.float32)
        kernel(((n + 31) // 32, (m + 31) // 32), (32, 32), (x, w, b, y, np.int32(m), np.int32(n), np.int32(k)))
        return y

    return linear_gelu


def make_model(xp: Any, seed: int = 0) -> tuple[Callable[..., Any], Any, Any]:
    """A step with two routines, as serving engines have: decode batches use a custom kernel
    (captured whole: FULL), prefill batches use cuBLAS for the larger GEMM, which CuPy cannot
    capture, so it is a graph break between the PIECEWISE pieces."""
    rng = np.random.default_rng(seed)
    weight = xp.asarray(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / np.sqrt(HIDDEN))
    bias = xp.asarray((0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    matmul = cupygraph.graph_break(xp.matmul)
    linear_gelu = make_linear_gelu(xp)

    def step(tokens: Any, weight: Any, bias: Any, decode: bool) -> Any:
        h = xp.tanh(tokens * np.float32(0.5) + np.float32(0.1))   # captured in every mode
        if decode:
            h = linear_gelu(h, weight, bias)                        # captured into the FULL graph
        else:
            h = gelu(xp, matmul(h, weight) + bias)                  # eager matmul between two pieces
        return h / (1.0 + xp.abs(h))                                # captured

    return step, weight, bias


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
    step, weight, bias = make_model(xp)
    config: Any = args.config or {"mode": "FULL_AND_PIECEWISE", "max_capture_size": 128, "max_num_reqs": 128}
    serve = cupygraph.jit(
        step, config=config, constant_argnums=(1, 2),
        descriptor_fn=lambda tokens, weight, bias, decode: cupygraph.BatchDescriptor(
            tokens.shape[0], num_reqs=tokens.shape[0] if decode else None, uniform_decode=decode),
    )
    rng = np.random.default_rng(1)
    worst = worst_unpadded = 0.0
    for _ in range(args.steps):
        decode = bool(rng.random() < 0.7)
        n = int(rng.integers(1, 129))
        tokens = xp.asarray(rng.standard_normal((n, HIDDEN)).astype(np.float32))
        got = serve(tokens, weight, bias, decode)
        # A replay is the eager step on the padded batch, bit for bit; the call that captures its key runs
        # the step as it is, at n rows. At n rows the prefill's matmul may sum in another order (BLAS and
        # cuBLAS pick kernels by row count): rounding only (RELIABILITY.md, promise 1).
        padded = xp.zeros((serve.config.get_padded_batch_size(n), HIDDEN), dtype=np.float32)
        padded[:n] = tokens
        unpadded = float(abs(got - step(tokens, weight, bias, decode)).max())
        worst = max(worst, min(float(abs(got - step(padded, weight, bias, decode)[:n]).max()), unpadded))
        worst_unpadded = max(worst_unpadded, unpadded)
    stats = serve.stats()
    print(serve.describe())
    print(f"largest difference from the eager step (the padded batch for a replay, the real rows for the call "
          f"that captured): {worst:.3g}; from the eager step on the real rows: {worst_unpadded:.3g}")
    return {"worst": worst, "worst_unpadded": worst_unpadded, "replays_by_mode": dict(stats.replays_by_mode),
            "fallbacks": stats.fallbacks, "calls": stats.calls}


if __name__ == "__main__":
    main()
