"""``make demo`` / ``cupygraph demo``: a heat-equation pipeline called with varying batch sizes.

On a GPU the pipeline is a chain of custom RawKernel launches; without one, the same math in NumPy
runs on the host backend (and the timings say so: they are not GPU timings).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from . import backends
from .api.jit import GraphedFunction, jit, resolve_config
from .config.model import CUDAGraphConfig
from .errors import BackendUnavailableError

GRID = 64
STEPS = 16
ALPHA = 0.2


def heat_numpy(u: np.ndarray, steps: int = STEPS, alpha: float = ALPHA) -> np.ndarray:
    """``steps`` explicit heat-equation steps on a batch of grids (boundaries fixed)."""
    for _ in range(steps):
        nxt = u.copy()
        c = u[:, 1:-1, 1:-1]
        lap = u[:, :-2, 1:-1] + u[:, 2:, 1:-1] + u[:, 1:-1, :-2] + u[:, 1:-1, 2:] - 4.0 * c
        nxt[:, 1:-1, 1:-1] = c + np.float32(alpha) * lap
        u = nxt
    return u


def make_heat_cupy(steps: int = STEPS, alpha: float = ALPHA) -> Callable[[Any], Any]:
    """The same pipeline as ``steps`` launches of the ``heat_step`` RawKernel."""
    import cupy

    from .kernels import get_kernel

    kernel = get_kernel("heat.cu", "heat_step")

    def heat(u: Any) -> Any:
        batch, ny, nx = u.shape
        a, b = cupy.empty_like(u), cupy.empty_like(u)
        blocks = min(4096, (u.size + 255) // 256)
        src = u
        for step in range(steps):
            dst = a if step % 2 == 0 else b
            kernel((blocks,), (256,), (src, dst, np.int32(batch), np.int32(ny), np.int32(nx), np.float32(alpha)))
            src = dst
        return src

    return heat


def _time_calls(fn: Callable[[Any], Any], inputs: list[Any], sync: Callable[[], None]) -> list[float]:
    times = []
    for x in inputs:
        sync()
        start = time.perf_counter()
        fn(x)
        sync()
        times.append(time.perf_counter() - start)
    return times


@dataclasses.dataclass
class Workload:
    """The demo pipeline ready to run: eager and graphed versions, inputs and a device sync."""

    eager: Callable[[Any], Any]
    graphed: GraphedFunction
    inputs: list[Any]
    sync: Callable[[], None]
    banner: str


def build_workload(backend: Optional[str] = None, config_path: Optional[str] = None, calls: int = 300,
                   seed: int = 0) -> Workload:
    """The heat-equation pipeline under a config, with ``calls`` inputs of serving-like batch sizes.

    ``backend`` (auto, cupy or host) overrides the config's ``backend`` field; None keeps it.
    """
    base = resolve_config(config_path) if config_path else CUDAGraphConfig(max_capture_size=64)
    asked_by = "--backend cupy" if backend else f"{config_path}: field 'backend'"
    backend = backend or base.backend
    if backend not in ("auto", "cupy", "host"):
        raise ValueError(f"backend must be auto, cupy or host, got {backend!r}")
    reason = backends.gpu_unavailable_reason()  # looked up at call time, so a test can stand in for the probe
    if backend == "cupy" and reason is not None:
        raise BackendUnavailableError(f"the cupy backend was asked for ({asked_by}), but {reason}; "
                                      f"use --backend host, or auto")
    use_gpu = backend == "cupy" or (backend == "auto" and reason is None)
    config = CUDAGraphConfig(**{**base.to_dict(), "backend": "cupy" if use_gpu else "host"})
    rng = np.random.default_rng(seed)
    largest = config.largest_capture_size or 64
    sizes = np.minimum(rng.geometric(0.08, size=calls), largest).tolist()
    if use_gpu:
        import cupy

        eager: Callable[[Any], Any] = make_heat_cupy()
        inputs = [cupy.asarray(rng.random((n, GRID, GRID), dtype=np.float32)) for n in sizes]
        sync: Callable[[], None] = cupy.cuda.Device().synchronize
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
        banner = f"GPU: {name} (CuPy {cupy.__version__}); {STEPS} RawKernel launches per call"
    else:
        eager = heat_numpy
        inputs = [rng.random((n, GRID, GRID), dtype=np.float32) for n in sizes]
        sync = lambda: None
        banner = (f"No GPU here ({reason}): running the NumPy pipeline on the host backend; "
                  "timings are host timings, not GPU timings.")
    return Workload(eager, jit(eager, config=config), inputs, sync, banner)


def main(args: Optional[argparse.Namespace] = None) -> int:
    work = build_workload(getattr(args, "backend", None), getattr(args, "config", None),
                          int(getattr(args, "calls", 300) or 300))
    eager, graphed, xs, sync = work.eager, work.graphed, work.inputs, work.sync
    print(work.banner)
    print(f"Capturing {len(graphed.config.cudagraph_capture_sizes)} sizes ahead of time (largest first) ...")
    start = time.perf_counter()
    graphed.warmup(xs[0])
    print(f"  captured in {time.perf_counter() - start:.3f} s")

    for x in xs[:3]:  # correctness before timing: graphed equals eager bit for bit
        want, got = eager(x), graphed(x)
        if not bool((want == got).all()):
            print("MISMATCH between graphed and eager results")
            return 1
    eager_t = statistics.median(_time_calls(eager, xs, sync))
    graph_t = statistics.median(_time_calls(graphed, xs, sync))
    stats = graphed.stats()
    sizes = [x.shape[0] for x in xs]
    rows = [
        ("backend", graphed.backend.name),
        (f"calls (batch 1..{max(sizes)})", str(len(xs))),
        ("eager per call (median)", f"{eager_t * 1e6:.1f} us"),
        ("graphed per call (median)", f"{graph_t * 1e6:.1f} us"),
        ("speedup", f"{eager_t / graph_t:.2f}x"),
        ("hit rate", f"{stats.hit_rate():.1%}"),
        ("graphs held", str(graphed.registry.num_graphs())),
        ("graph memory", f"{graphed.registry.total_bytes() / 2**20:.1f} MiB"),
        ("eager fallbacks", str(stats.fallbacks)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    return 0


def per_size_timings(work: Workload, reps: int = 20) -> list[tuple[int, Optional[int], float, float]]:
    """For each distinct batch size: (size, padded size or None, eager median s, graphed median s)."""
    by_size: dict[int, Any] = {}
    for x in work.inputs:
        by_size.setdefault(x.shape[0], x)
    rows = []
    for n in sorted(by_size):
        x = by_size[n]
        work.graphed(x)  # capture outside the timing
        eager_t = statistics.median(_time_calls(work.eager, [x] * reps, work.sync))
        graph_t = statistics.median(_time_calls(work.graphed, [x] * reps, work.sync))
        rows.append((n, work.graphed.config.get_padded_batch_size(n), eager_t, graph_t))
    return rows
