"""CG to tolerance on n x n Poisson grids: one graph with a device while loop vs the alternatives.

Variants (same problem, same tolerance; the first three use the same RawKernels):
  graph_while  cupygraph.jit(cg_solve): the loop is a CUDA conditional WHILE node, one launch.
  eager        (a) eager CuPy, the residual read back on the host every iteration.
  graph_body   (b) one CG iteration captured with cupygraph.jit, replayed per iteration, with a
               host convergence check after each replay.
  jax          (c) jax.lax.while_loop under jax.jit, float64 (skipped with a note without jax).

Each variant is warmed up (compilation, capture), then timed ``--repeats`` times end to end with a
device synchronisation; the table shows medians in milliseconds. Without a GPU it runs the NumPy
versions on the host backend, which only checks that the tool works: those are not GPU figures.

    python tools/bench_control_flow.py --sizes 64 128 256 512 --out bench_cf.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupygraph  # noqa: E402


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("cg_poisson", ROOT / "examples" / "cg_poisson.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


ex = _load_example()


def _timed(fn: Callable[[], int], sync: Callable[[], None], repeats: int) -> tuple[float, int]:
    """Median seconds of ``fn`` (which returns its iteration count) and that count."""
    times, iterations = [], -1
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        iterations = fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), iterations


def _graph_body_solver(b: Any, tol: float, max_iters: int) -> Callable[[], int]:
    """(b): state allocated once, one iteration as a captured graph, a host check per iteration."""
    xp, ops, s = ex._setup(b, tol)
    tol2 = tol * tol
    token = xp.zeros(1, dtype=np.int32)

    def one_iteration(token: Any) -> Any:
        ex._iteration(ops, s, tol2)
        return s["go"]

    # The state lives in the closure (used by address); the one-row `token` keeps jit on its hot
    # path and output_mode="view" hands back the flag itself: per iteration one 4-byte copy in,
    # one graph launch and the host read of the flag.
    step = cupygraph.jit(one_iteration, config=dict(output_mode="view", on_capture_error="raise"))

    def solve() -> int:
        ops.init(b, s["x"], s["r"], s["p"], s["part"])
        ops.start(s["part"], s["rr"], s["go"], tol2)
        iterations, go = 0, bool(int(s["go"]))
        while go and iterations < max_iters:
            go = bool(int(step(token)))
            iterations += 1
        return iterations

    return solve


def _jax_solver(b_host: np.ndarray, tol: float, max_iters: int, device: int) -> Optional[Callable[[], int]]:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to CuPy
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    _pin_jax(jax, device)
    n = b_host.shape[-1]

    def apply_a(p: Any) -> Any:
        q = jnp.pad(p, 1)
        return 4.0 * p - q[:-2, 1:-1] - q[2:, 1:-1] - q[1:-1, :-2] - q[1:-1, 2:]

    @jax.jit
    def solve(b: Any) -> Any:
        def cond(state: Any) -> Any:
            return (state[3] >= tol * tol) & (state[4] < max_iters)

        def body(state: Any) -> Any:
            x, r, p, rr, k = state
            ap = apply_a(p)
            alpha = rr / jnp.vdot(p, ap)
            x = x + alpha * p
            r = r - alpha * ap
            rr_new = jnp.vdot(r, r)
            p = r + (rr_new / rr) * p
            return x, r, p, rr_new, k + 1

        init = (jnp.zeros_like(b), b, b, jnp.vdot(b, b), jnp.int32(0))
        return jax.lax.while_loop(cond, body, init)

    b = jnp.asarray(b_host.reshape(n, n), dtype=jnp.float64)
    return lambda: int(solve(b)[4].block_until_ready())


def _pin_jax(jax: Any, device: int) -> None:
    """JAX on the same card as CuPy; then CuPy back on it (JAX's start-up can switch the current device)."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        return  # JAX without a GPU backend runs on the host: nothing to pin
    matching = [d for d in gpus if getattr(d, "local_hardware_id", None) == device]
    jax.config.update("jax_default_device", matching[0] if matching else gpus[device])
    if cupygraph.gpu_available():
        import cupy

        cupy.cuda.Device(device).use()


def run(sizes: list[int], tol: float, repeats: int, device: int = 0) -> tuple[list[dict], dict]:
    if cupygraph.gpu_available():
        import cupy

        cupy.cuda.Device(device).use()
        xp, sync = cupy, cupy.cuda.Device(device).synchronize
        props = cupy.cuda.runtime.getDeviceProperties(device)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        info = {"device": name, "cupy": cupy.__version__,
                  "driver": cupy.cuda.runtime.driverGetVersion(), "runtime": cupy.cuda.runtime.runtimeGetVersion()}
    else:
        xp, sync = np, (lambda: None)
        info = {"device": f"host (NumPy, no GPU: {platform.processor() or platform.machine()})"}
        print("no GPU: timing the NumPy versions on the host backend; these are not GPU figures\n")
    notes = []
    rows = []
    for n in sizes:
        max_iters = 10 * n
        b = ex.poisson_rhs(xp, n)
        solver = ex.make_solver(config=dict(on_capture_error="raise"))
        variants: dict[str, Callable[[], int]] = {
            "graph_while": lambda solver=solver, b=b, max_iters=max_iters: int(solver(b, tol, max_iters)[1]),
            "eager": lambda b=b, max_iters=max_iters: ex.cg_host_loop(b, tol, max_iters)[1],
            "graph_body": _graph_body_solver(b, tol, max_iters),
        }
        b_host = b.get() if hasattr(b, "get") else b
        jax_solve = _jax_solver(b_host, tol, max_iters, device)
        if jax_solve is None:
            if not notes:
                notes.append("jax is not installed: variant (c) skipped")
        else:
            variants["jax"] = jax_solve
        row: dict[str, Any] = {"n": n, "unknowns": n * n, "max_iters": max_iters}
        for label, fn in variants.items():
            fn()  # warm-up: compile, capture
            seconds, iterations = _timed(fn, sync, repeats)
            row[label] = {"median_ms": 1e3 * seconds, "iterations": iterations}
        rows.append(row)
        print(f"  {n}x{n}: " + ", ".join(f"{k} {v['median_ms']:.2f} ms ({v['iterations']} it)"
                                         for k, v in row.items() if isinstance(v, dict)), flush=True)
    meta = {**info, "tol": tol, "repeats": repeats, "python": platform.python_version(), "pinned_device": device,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "notes": notes}
    return rows, meta


def markdown(rows: list[dict], meta: dict) -> str:
    labels = [("graph_while", "graph + device while"), ("eager", "(a) eager, host check"),
              ("graph_body", "(b) graphed body, host check"), ("jax", "(c) jax.lax.while_loop")]
    present = [(k, t) for k, t in labels if any(k in r for r in rows)]
    head = ["grid", "iterations"] + [f"{t} (ms)" for _, t in present] + ["vs (b)"]
    if any("jax" in r for r in rows):
        head.append("vs (c)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ours = r["graph_while"]["median_ms"]
        cells = [f"{r['n']}²", str(r["graph_while"]["iterations"])]
        cells += [f"{r[k]['median_ms']:.2f}" if k in r else "—" for k, _ in present]
        cells.append(f"{r['graph_body']['median_ms'] / ours:.2f}×")
        if "vs (c)" in head:
            cells.append(f"{r['jax']['median_ms'] / ours:.2f}×" if "jax" in r else "—")
        lines.append("| " + " | ".join(cells) + " |")
    foot = [f"\n{meta['device']}, tol {meta['tol']:g}, median of {meta['repeats']}, {meta['date']}."]
    foot += [f"Note: {note}." for note in meta["notes"]]
    foot.append("vs (x): time of variant x divided by the device-while graph's (above 1: the graph is faster).")
    return "\n".join(lines + foot)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512], help="grid sides")
    parser.add_argument("--tol", type=float, default=1e-6, help="residual norm to reach")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--device", type=int, default=0, help="CUDA device CuPy and JAX are pinned to (default 0)")
    args = parser.parse_args(argv)
    rows, meta = run(args.sizes, args.tol, args.repeats, args.device)
    meta["command"] = " ".join(["python3 tools/bench_control_flow.py", *(argv if argv is not None else sys.argv[1:])])
    print()
    print(markdown(rows, meta))
    if args.out is not None:
        args.out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
