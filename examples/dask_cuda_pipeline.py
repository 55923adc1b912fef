"""Graphs on every GPU of a machine with Dask-CUDA: one worker per GPU, no collectives.

    python examples/dask_cuda_pipeline.py --tasks 64 --rows-vary

CPU CI only checks that this file imports and needs ``dask_cuda`` to run; on the GPU machines it
runs with dask-cuda's wheels carried in (``tools/gpu_distributed.sh`` with ``DASK=1``). Every task
also runs the same function eagerly and reports whether the graphed result is the same, bit for bit.

``LocalCUDACluster`` starts one worker process per GPU (``CUDA_VISIBLE_DEVICES`` rotated, so each
worker's device 0 is its own GPU). Each worker builds its jitted pipeline once, on first use, and
keeps it in the worker process (one registry per worker): later tasks on that worker replay its
graphs instead of capturing again. Each task returns a small NumPy summary; at the end the client
gathers every worker's statistics (``client.run``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

SIZES = (32, 64, 128)
"""Capture sizes; tasks use exactly these batch sizes, so each graphed result can be compared with
the eager one bit for bit (a padded batch may reduce its rows in another order)."""

def normalise(x: Any) -> Any:
    """The pipeline itself: centre and scale every row, then squash it."""
    import cupy

    centred = x - x.mean(axis=1, keepdims=True)
    return cupy.tanh(centred / (cupy.sqrt((centred * centred).mean(axis=1, keepdims=True)) + 1e-6))


def pipeline() -> Any:
    """This worker's jitted function (one graph family, one registry, on this worker's GPU), kept on
    the worker object: a module global would not do, as the tasks of a script's ``__main__`` travel
    by value, each with its own copy of the module's globals."""
    from dask.distributed import get_worker

    worker = get_worker()
    fn = getattr(worker, "cupygraph_pipeline", None)
    if fn is None:
        import cupygraph as cg

        fn = worker.cupygraph_pipeline = cg.jit(normalise, config=dict(capture_sizes=list(SIZES)))
    return fn


def task(seed: int, rows: int, cols: int) -> dict[str, Any]:
    """One unit of work: make a batch on this worker's GPU, run the pipeline, return a summary."""
    import cupy

    x = cupy.random.default_rng(seed).standard_normal((rows, cols), dtype=cupy.float32)
    y = pipeline()(x)
    same = bool(cupy.array_equal(y, normalise(x)))  # the graph against the same function run eagerly
    return {"seed": seed, "pid": os.getpid(), "mean_abs": float(cupy.abs(y).mean()), "same_as_eager": same}


def worker_stats(dask_worker: Any) -> dict[str, Any]:
    """Run on every worker by ``client.run``: its pipeline's statistics (empty before its first task)."""
    fn = getattr(dask_worker, "cupygraph_pipeline", None)
    return {} if fn is None else fn.stats().to_dict()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rows", type=int, default=64, choices=SIZES)
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--rows-vary", action="store_true", help="each task takes one of the capture sizes in turn")
    args = parser.parse_args(argv)
    from dask.distributed import Client
    from dask_cuda import LocalCUDACluster

    with LocalCUDACluster() as cluster, Client(cluster) as client:
        rows = [SIZES[seed % len(SIZES)] if args.rows_vary else args.rows for seed in range(args.tasks)]
        futures = [client.submit(task, seed, n, args.cols, pure=False) for seed, n in zip(range(args.tasks), rows)]
        results = client.gather(futures)
        stats = client.run(worker_stats)
    captures = sum(s.get("captures", 0) for s in stats.values())
    hits = sum(s.get("hits", 0) for s in stats.values())
    same = sum(r["same_as_eager"] for r in results)
    print(f"{len(results)} tasks on {len(stats)} workers: {captures} captures, {hits} replays from cached graphs; "
          f"{same} of {len(results)} results equal to eager bit for bit")
    for worker, s in sorted(stats.items()):
        print(f"  {worker}: {s.get('captures', 0)} captures, {s.get('hits', 0)} hits")
    return {"results": results, "stats": stats, "mean_abs": float(np.mean([r["mean_abs"] for r in results]))}


if __name__ == "__main__":
    main()
