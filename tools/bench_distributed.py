"""Strong scaling of the distributed heat equation (examples/distributed_heat.py), graphs vs eager.

Run one process per GPU:

    mpiexec -n 2 python tools/bench_distributed.py --sizes 512 2048 16384 --out bench_distributed.json

For each grid size it times, per step (median of ``--repeats`` blocks of ``--calls`` calls of
``--steps`` steps, CUDA events on each rank's stream, the slowest rank counted):
  * ``dist_graph``: every rank's slab, halo rows by NCCL send/recv inside one graph per call;
  * ``dist_eager``: the same steps eagerly (a kernel and an NCCL group per step, launched from Python);
  * ``one_graph`` / ``one_eager``: the whole grid on rank 0's GPU alone (the other ranks wait).
``scaling`` is dist_graph / one_graph (strong scaling: 0.5 is perfect on two GPUs). Not a test:
nothing here asserts a time. On the host backend it runs too (perf_counter), for the logic only.

``--report bench_distributed.json --markdown distributed.md`` (no MPI needed) renders a saved run
as a page; ``--remark`` lines (card, date, command) go in its preamble.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cupygraph import distributed as dist

_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "distributed_heat.py"


def _load_heat() -> Any:
    spec = importlib.util.spec_from_file_location("distributed_heat", _EXAMPLE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_EXAMPLE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


heat = _load_heat()


def timed(xp: Any, step: Callable[..., Any], coef: Any, u: Any, calls: int) -> tuple[float, Any]:
    """Seconds for ``calls`` calls, measured on the device (events) or the host clock."""
    if xp.__name__ == "cupy":
        start, end = xp.cuda.Event(), xp.cuda.Event()
        start.record()
        for _ in range(calls):
            u = step(coef, u)
        end.record()
        end.synchronize()
        return xp.cuda.get_elapsed_time(start, end) / 1e3, u
    begin = time.perf_counter()
    for _ in range(calls):
        u = step(coef, u)
    return time.perf_counter() - begin, u


def per_step_us(comm: Any, slab: Any, xp: Any, args: argparse.Namespace, *, graphs: bool, together: bool) -> float:
    """Median microseconds per step; ``together``: the slowest rank's (every rank times)."""
    coef = xp.full((1,), 0.2, dtype=xp.float32)
    step = heat.make_step(slab, args.steps, graphs=graphs, backend=comm.backend_name)
    u = slab.initial()
    for _ in range(2):  # capture and first replays
        u = step(coef, u)
    samples = []
    for _ in range(args.repeats):
        if together:
            comm.barrier()
        seconds, u = timed(xp, step, coef, u, args.calls)
        samples.append(1e6 * seconds / (args.calls * args.steps))
    mine = statistics.median(samples)
    if together:
        return float(comm.agree_max([int(mine * 1000)])[0]) / 1000
    return mine


def report(payload: dict[str, Any], remarks: list[str], target: float = 0.55) -> str:
    """A markdown page of one saved run: per-step times and the strong-scaling ratio per grid size."""
    ranks = payload["ranks"]
    lines = [f"# Distributed heat equation: {ranks} GPUs vs one ({payload['device']})", ""]
    lines += [f"- {r}" for r in remarks] + ([""] if remarks else [])
    lines += [
        f"Per step, microseconds (median of {payload.get('repeats', '?')} blocks of {payload.get('calls', '?')} calls "
        f"of {payload.get('steps', '?')} steps; CUDA events; for {ranks} ranks the slowest rank). "
        f"`scaling` = {ranks}-GPU graph ÷ one-GPU graph (strong scaling; the target is ≤ {target} on 2 GPUs, "
        "1/ranks is perfect). `graph ÷ eager` compares graphed with eager steps on the same GPUs.", "",
        f"| grid | {ranks} GPUs graph | {ranks} GPUs eager | 1 GPU graph | 1 GPU eager | scaling | "
        f"graph ÷ eager ({ranks} GPUs) | graph ÷ eager (1 GPU) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(row: dict[str, Any], key: str, digits: int = 1) -> str:
        return f"{row[key]:.{digits}f}" if key in row else "–"

    for row in payload["rows"]:
        scaling = row.get("scaling")
        mark = "" if scaling is None else (" ✓" if scaling <= target else " ✗")
        lines.append(
            f"| {row['n']}×{row['n']} | {cell(row, 'dist_graph')} | {cell(row, 'dist_eager')} | "
            f"{cell(row, 'one_graph')} | {cell(row, 'one_eager')} | {cell(row, 'scaling', 3)}{mark} | "
            f"{cell(row, 'graph_vs_eager', 3)} | {cell(row, 'one_graph_vs_eager', 3)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="render this saved JSON (no MPI) instead of running")
    parser.add_argument("--markdown", type=Path, help="with --report: the page to write")
    parser.add_argument("--remark", action="append", default=[], help="with --report: a preamble line (repeatable)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--eager-up-to", type=int, default=4096, help="time eager steps only up to this size")
    parser.add_argument("--backend", default="auto", choices=["auto", "cupy", "host"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.report is not None:
        try:
            payload = json.loads(args.report.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            parser.error(f"--report {args.report}: cannot read a saved run ({err})")
        page = report(payload, args.remark)
        if args.markdown is not None:
            args.markdown.write_text(page, encoding="utf-8")
        else:
            print(page, end="")
        return list(payload["rows"])
    comm = dist.init(backend=args.backend)
    xp = __import__("numpy") if comm.backend_name == "host" else __import__("cupy")
    rows = []
    for n in args.sizes:
        row: dict[str, Any] = {"n": n, "ranks": comm.size, "steps_per_call": args.steps}
        modes = [True, False] if n <= args.eager_up_to else [True]
        for graphs in modes:
            key = "graph" if graphs else "eager"
            row[f"dist_{key}"] = per_step_us(comm, heat.Slab(comm, n, xp), xp, args, graphs=graphs, together=True)
            comm.barrier()
            if comm.rank == 0:
                row[f"one_{key}"] = per_step_us(comm, heat.Slab(None, n, xp), xp, args, graphs=graphs, together=False)
            comm.barrier()
        if comm.rank == 0:
            row["scaling"] = row["dist_graph"] / row["one_graph"]
            if "dist_eager" in row:
                row["graph_vs_eager"] = row["dist_graph"] / row["dist_eager"]
                row["one_graph_vs_eager"] = row["one_graph"] / row["one_eager"]
            print(json.dumps(row), flush=True)
        rows.append(row)
        if comm.rank == 0 and args.out is not None:  # after every size: a later size that fails keeps these
            args.out.write_text(json.dumps({"device": device_name(comm, xp), "ranks": comm.size, "steps": args.steps,
                                            "calls": args.calls, "repeats": args.repeats, "rows": rows}, indent=1))
        release_memory(xp)
    return rows


def device_name(comm: Any, xp: Any) -> str:
    if comm.backend_name == "host":
        return "host"
    name = xp.cuda.runtime.getDeviceProperties(comm.device)["name"]
    return str(name.decode() if isinstance(name, bytes) else name)


def release_memory(xp: Any) -> None:
    """Give the last size's memory back (its graphs went with their functions) before a larger size."""
    gc.collect()
    if xp.__name__ == "cupy":
        xp.cuda.Device().synchronize()
        xp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
