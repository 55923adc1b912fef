"""An MLP as ONE CUDA graph per batch size: cupygraph.matmul (cuBLAS) + bias/GELU, in FULL mode.

    python examples/mlp_full.py --calls 200

``cupy.matmul`` cannot be captured (CuPy refuses cuBLAS under stream capture), so a CuPy MLP used
to need PIECEWISE mode: one graph per run of elementwise kernels and an eager matmul between them.
``cupygraph.matmul`` calls cuBLAS on a handle bound to the capture stream, so every layer - GEMM
and bias + GELU - is recorded into a single graph and a call is one replay. Without a GPU the same
code runs NumPy on the host backend (same padding, same statistics).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

import cupygraph

HIDDEN = 256
LAYERS = 8


def weights(seed: int = 1234) -> list[np.ndarray]:
    """(w, b) per layer; He-scaled so activations stay O(1) through the layers."""
    rng = np.random.default_rng(seed)
    params: list[np.ndarray] = []
    for _ in range(LAYERS):
        params.append((rng.standard_normal((HIDDEN, HIDDEN)) * np.sqrt(2.0 / HIDDEN)).astype(np.float32))
        params.append((0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    return params


def gelu_numpy(v: Any) -> Any:
    return 0.5 * v * (1.0 + np.tanh(np.float32(0.7978845608028654) * (v + np.float32(0.044715) * v * v * v)))


def make_mlp(xp: Any) -> Any:
    """``mlp(x, *params)``: LAYERS x (cupygraph.matmul, then bias + tanh-GELU in one kernel on the GPU)."""
    if xp is np:
        def bias_gelu(y: Any, b: Any) -> Any:
            return gelu_numpy(y + b)
    else:
        kernel = xp.ElementwiseKernel(
            "float32 b", "float32 y",
            "float v = y + b; y = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));",
            "cupygraph_example_bias_gelu")

        def bias_gelu(y: Any, b: Any) -> Any:
            kernel(b, y)  # in place: y is the GEMM's fresh output
            return y

    def mlp(x: Any, *params: Any) -> Any:
        for w, b in zip(params[0::2], params[1::2]):
            x = bias_gelu(cupygraph.matmul(x, w), b)
        return x

    return mlp


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--backend", choices=("auto", "cupy", "host"), default="auto")
    args = parser.parse_args(argv)

    on_gpu = args.backend == "cupy" or (args.backend == "auto" and cupygraph.gpu_available())
    if on_gpu:
        import cupy as xp
    else:
        xp = np
        print("running the NumPy MLP on the host backend")
    params = [xp.asarray(p) for p in weights()]
    mlp = make_mlp(xp)
    # The weights are constants: captured by address, not copied at every call.
    graphed = cupygraph.jit(mlp, constant_argnums=tuple(range(1, 1 + len(params))),
                            config={"mode": "FULL", "max_capture_size": args.max_batch,
                                    "backend": "cupy" if on_gpu else "host"})
    rng = np.random.default_rng(0)
    worst = worst_unpadded = 0.0
    for _ in range(args.calls):
        n = int(rng.integers(1, args.max_batch + 1))
        x = xp.asarray(rng.standard_normal((n, HIDDEN)).astype(np.float32))
        got = graphed(x, *params)
        # The graph ran the padded batch (pad_value 0 rows up to its capture size): eagerly on the same
        # padded rows the same GEMMs give the same bits; at n rows BLAS/cuBLAS may pick other kernels
        # and sum in another order, so only the rounding differs (RELIABILITY.md, promise 1).
        padded = xp.zeros((graphed.config.get_padded_batch_size(n), HIDDEN), dtype=np.float32)
        padded[:n] = x
        unpadded = float(abs(got - mlp(x, *params)).max())  # the call that captures a key runs as it is
        worst = max(worst, min(float(abs(got - mlp(padded, *params)[:n]).max()), unpadded))
        worst_unpadded = max(worst_unpadded, unpadded)
    stats = graphed.stats()
    print(graphed.describe())
    print(f"largest difference from eager on the padded batch: {worst}  (a replay is that call, bit for bit)")
    print(f"largest difference from eager on the real rows: {worst_unpadded:.3g}  (GEMM rounding at another "
          f"row count; fallbacks: {stats.fallbacks})")
    return {"worst": worst, "worst_unpadded": worst_unpadded, "fallbacks": stats.fallbacks,
            "graphs": graphed.registry.num_graphs(), "hit_rate": stats.hit_rate()}


if __name__ == "__main__":
    main()
