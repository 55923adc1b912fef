#!/usr/bin/env python3
"""Benchmark cupygraph against the alternatives a user would pick, on one GPU, in one process.

Competitors (each workload): eager CuPy; a bare hand-captured CuPy graph at the exact size (the
floor: one input memcpy and one launch, no output copy); cupygraph ``jit`` with copied and with
view outputs; PyTorch eager; a hand-captured ``torch.cuda.CUDAGraph`` with its input copy;
``torch.compile(mode="reduce-overhead")``; ``jax.jit``. Workloads: chain, stencil (fixed B and a
serving run with varied B), mlp, piecewise, capture (see tools/bench_workloads.py).

Every competitor is checked against eager CuPy first; one that fails to build, compile or match
is reported as an error row and the run goes on. See bench_report.METHOD for how figures are timed.

    python tools/bench.py [--quick] [--out results.json] [--markdown results.md] [--plots DIR]
                          [--workloads chain,stencil,...] [--skip torch-compile,jax,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import numpy as np

# JAX would otherwise reserve 75% of the card at import and starve CuPy and PyTorch.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_report
from tools.bench_peers import COMPETITORS, Competitor, Frameworks, peer_builders
from tools.bench_workloads import (
    GRID,
    HEAT_STEPS,
    SERVING_MAX_BATCH,
    WORKLOADS,
    Workload,
    chain_fn,
    piecewise_unavailable,
    random_inputs,
    serving_sizes,
)

# chain_fn is re-exported for tools/profile_hot_path.py.
__all__ = ["BareGraph", "BarePiecewise", "Case", "chain_fn", "main", "measure"]

WORKLOAD_NAMES = ("chain", "stencil", "serving", "mlp", "piecewise", "capture")
SERVING_COMPETITORS = ("cupy", "jit-copy", "jit-view", "torch", "torch-compile")
SETUP_CALLS = 3  # calls counted into setup_s (torch.compile needs >= 3 to record its graph)


class BareGraph:
    """The floor: a hand-captured CuPy graph at the exact size, one input memcpy, no output copy.

    The graph's blocks come from a private pool, so nothing else is handed memory the graph writes.
    """

    def __init__(self, fn: Callable[[Any], Any], example: Any):
        import cupy

        self.pool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)
        with cupy.cuda.using_allocator(self.pool.malloc):
            self.static_in = cupy.empty_like(example)
            self.static_in[...] = example
            self.graph, self.static_out = self._capture(fn, self.static_in)

    def _capture(self, fn: Callable[[Any], Any], arg: Any) -> tuple[Any, Any]:
        import cupy

        stream = self._stream
        stream.wait_event(cupy.cuda.get_current_stream().record())
        with stream:
            fn(arg)  # warm-up: compile, fill the pool for this stream
            stream.begin_capture()
            out = None
            try:
                out = fn(arg)
            finally:
                graph = stream.end_capture()
        graph.upload(stream)
        stream.synchronize()
        return graph, out

    def load(self, x: Any) -> None:
        import cupy

        cupy.cuda.runtime.memcpyAsync(self.static_in.data.ptr, x.data.ptr, x.nbytes,
                                      cupy.cuda.runtime.memcpyDefault, cupy.cuda.get_current_stream().ptr)

    def __call__(self, x: Any) -> Any:
        self.load(x)
        self.graph.launch()
        return self.static_out

    def nbytes(self) -> int:
        return int(self.pool.total_bytes())


class OwnedOutput:
    """A bare graph that hands the caller an array it owns, as cupygraph's default ``copy`` does:
    what owning the output costs, apart from everything else cupygraph does per call."""

    def __init__(self, graph: BareGraph):
        self.graph = graph

    def __call__(self, x: Any) -> Any:
        import cupy

        out = self.graph(x)
        owned = cupy.empty_like(out)
        cupy.cuda.runtime.memcpyAsync(owned.data.ptr, out.data.ptr, out.nbytes, cupy.cuda.runtime.memcpyDefault,
                                      cupy.cuda.get_current_stream().ptr)
        return owned


class BarePiecewise(BareGraph):
    """The piecewise floor: head graph, eager cuBLAS matmul into a fixed buffer, tail graph."""

    def __init__(self, head: Callable, tail: Callable, w: Any, example: Any):
        import cupy

        self.pool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self.w = w
        with cupy.cuda.using_allocator(self.pool.malloc):
            self.static_in = cupy.empty_like(example)
            self.static_in[...] = example
            self.head, self.mid = self._capture(head, self.static_in)
            self.product = cupy.matmul(self.mid, w)
            self.tail, self.static_out = self._capture(tail, self.product)
        self._matmul = cupy.matmul

    def __call__(self, x: Any) -> Any:
        self.load(x)
        self.head.launch()
        self._matmul(self.mid, self.w, out=self.product)
        self.tail.launch()
        return self.static_out


class Case:
    """One workload at one size (or the serving mix): inputs and weights for every framework."""

    def __init__(self, workload: Workload, size: Optional[int], shapes: list[tuple[int, ...]], seed: int,
                 frameworks: Frameworks):
        import cupy

        self.workload, self.size, self.frameworks = workload, size, frameworks
        self.host_inputs = random_inputs(shapes, seed)
        self.host_params = workload.params()
        self.cupy_inputs = [cupy.asarray(a) for a in self.host_inputs]
        self.cupy_params = [cupy.asarray(p) for p in self.host_params]
        self.eager = workload.cupy_fn()
        self._converted: dict[str, tuple[list, list]] = {}

    def cupy_call(self, fn: Optional[Callable] = None) -> Callable[[Any], Any]:
        fn = fn or self.eager
        params = self.cupy_params
        return (lambda x: fn(x, *params)) if params else fn

    def converted(self, name: str) -> tuple[list, list]:
        """(inputs, params) uploaded from the same NumPy arrays to PyTorch or JAX."""
        if name not in self._converted:
            fw = self.frameworks.get(name)
            self._converted[name] = ([fw.upload(a) for a in self.host_inputs], [fw.upload(p) for p in self.host_params])
        return self._converted[name]


def build_cupy(case: Case, key: str, serving: bool) -> Competitor:
    import cupygraph as cg

    fw = case.frameworks.get("cupy")
    if key == "cupy":
        return Competitor(key, case.cupy_call(), case.cupy_inputs, fw, exact=True)
    if key in ("bare", "bare-copy"):
        params, example = case.cupy_params, case.cupy_inputs[0]
        if case.workload.name == "piecewise":
            head, _, tail = case.workload.cupy_pieces()
            graph: BareGraph = BarePiecewise(head, tail, params[0], example)
        else:
            graph = BareGraph(case.cupy_call(), example)
        call = OwnedOutput(graph) if key == "bare-copy" else graph
        return Competitor(key, call, case.cupy_inputs, fw, exact=True, graph_bytes=graph.nbytes)
    sizes = dict(max_capture_size=SERVING_MAX_BATCH) if serving else dict(capture_sizes=[case.size])
    config = dict(output_mode="view" if key == "jit-view" else "copy", **sizes, **case.workload.jit_config)
    params = case.cupy_params
    graphed = cg.jit(case.eager, config=config, constant_argnums=tuple(range(1, 1 + len(params))))
    if serving:
        graphed.warmup(case.cupy_inputs[0], *params, progress=False)

    def note() -> str:
        stats = graphed.stats()
        reasons = getattr(stats, "fallbacks_by_reason", {})
        return f"eager fallbacks: {stats.fallbacks} {dict(reasons)}" if stats.fallbacks else ""

    return Competitor(key, case.cupy_call(graphed), case.cupy_inputs, fw, exact=True,
                      graph_bytes=graphed.registry.backend.pool_bytes, note=note)


def build(case: Case, key: str, serving: bool) -> Competitor:
    if key in ("cupy", "bare", "bare-copy", "jit-copy", "jit-view"):
        return build_cupy(case, key, serving)
    return peer_builders()[key](case, serving)


def check(c: Competitor, inputs: list, refs: list[np.ndarray], workload: Workload) -> float:
    """Max abs error against eager CuPy; raises when outside the tolerance."""
    worst = 0.0
    for x, want in zip(inputs, refs):
        got = np.asarray(c.fw.to_numpy(c.call(x)))
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(f"result is {got.dtype}{list(got.shape)}, eager CuPy gives {want.dtype}{list(want.shape)}")
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
        if c.exact:
            ok, tol = np.array_equal(got, want), "bit for bit"
        else:
            ok, tol = np.allclose(got, want, rtol=workload.peer_rtol, atol=workload.peer_atol), workload.tolerance()
        if not ok or not np.all(np.isfinite(got)):
            raise ValueError(f"result differs from eager CuPy: max abs err {err:.3g} (tolerance: {tol})")
        worst = max(worst, err)
    return worst


def measure(competitors: list[Competitor], reps: int, rounds: int, batch: int,
            device_sync: Callable[[], None]) -> tuple[dict[str, dict], dict[str, str]]:
    """Interleaved timing, so clock drift and thermal state hit every competitor alike.

    latency: host clock around one call and its framework's sync, device idle before each call;
    the order of competitors rotates every repetition. throughput: rounds of ``batch`` back-to-back
    calls; host issue time per call and GPU time per call (CUDA events; JAX: host clock to ready).
    Returns (figures by key, errors by key); a competitor that raises is dropped from the rest.
    """
    alive = list(competitors)
    errors: dict[str, str] = {}
    lat: dict[str, list[float]] = {c.key: [] for c in competitors}
    host: dict[str, list[float]] = {c.key: [] for c in competitors}
    gpu: dict[str, list[float]] = {c.key: [] for c in competitors}

    def rotated(i: int) -> list[Competitor]:
        k = len(alive)
        return alive[i % k:] + alive[: i % k] if k else []

    def drop(c: Competitor, err: BaseException) -> None:
        errors[c.key] = f"while timing: {type(err).__name__}: {err}"
        alive.remove(c)

    clock = time.perf_counter
    for i in range(reps):
        for c in rotated(i):
            x = c.inputs[i % len(c.inputs)]
            device_sync()
            try:
                start = clock()
                c.fw.finish(c.call(x))
                lat[c.key].append((clock() - start) * 1e6)
            except Exception as err:
                drop(c, err)
    for r in range(rounds):
        for c in rotated(r):
            xs, n = c.inputs, len(c.inputs)
            device_sync()
            try:
                token = c.fw.start()
                start = clock()
                for j in range(batch):
                    out = c.call(xs[(r * batch + j) % n])
                issued = clock() - start
                gpu_ms = c.fw.stop(token, out)
                c.fw.finish(out)
            except Exception as err:
                drop(c, err)
                continue
            host[c.key].append(issued * 1e6 / batch)
            gpu[c.key].append(gpu_ms * 1e3 / batch)
    figures = {}
    for c in alive:
        q = np.percentile(lat[c.key], [25, 50, 75])
        figures[c.key] = dict(latency_us=float(q[1]), latency_iqr_us=float(q[2] - q[0]), latency_reps=len(lat[c.key]),
                              host_issue_us=float(np.median(host[c.key])), gpu_us=float(np.median(gpu[c.key])),
                              method=c.fw.method)
    return figures, errors


def _error_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text if len(text) < 600 else text[:600] + " …"


def run_case(case: Case, keys: list[str], settings: dict, serving: bool = False) -> list[dict]:
    """Build, check, warm up and time every competitor on one case; one row each."""
    fws = case.frameworks
    cupy_fw = fws.get("cupy")
    checked = 3 if serving else 2
    refs = [cupy_fw.to_numpy(case.eager(x, *case.cupy_params)) for x in case.cupy_inputs[:checked]]
    base = dict(workload=case.workload.name + ("-serving" if serving else ""), axis=case.workload.axis,
                size=case.size, shape="varied" if serving else list(case.host_inputs[0].shape))
    if serving:
        base["sizes"] = [int(a.shape[0]) for a in case.host_inputs]
    rows: dict[str, dict] = {}
    ready: list[Competitor] = []
    for key in keys:
        row = rows[key] = dict(base, competitor=COMPETITORS[key], key=key)
        try:
            start = time.perf_counter()
            c = build(case, key, serving)
            for x in (c.inputs if serving and key == "torch-compile" else c.inputs[:1]) * SETUP_CALLS:
                c.fw.finish(c.call(x))  # compile / capture / record; every shape of the mix for torch.compile
            fws.device_sync()
            row["setup_s"] = time.perf_counter() - start
            row["tolerance"] = "bit for bit" if c.exact else case.workload.tolerance()
            row["max_abs_err"] = check(c, c.inputs[:checked], refs, case.workload)
            for i in range(settings["warmup"]):
                c.fw.finish(c.call(c.inputs[i % len(c.inputs)]))
            row["graph_bytes"] = c.graph_bytes() if c.graph_bytes else None
            ready.append(c)
        except Exception as err:
            row["error"] = _error_text(err)
            if settings.get("verbose"):
                traceback.print_exc()
    figures, errors = measure(ready, settings["reps"], settings["rounds"], settings["batch"], fws.device_sync)
    for c in ready:
        row = rows[c.key]
        row.update(figures.get(c.key, {}))
        if c.key in errors:
            row["error"] = errors[c.key]
        try:
            row["note"] = c.note()
        except Exception as err:
            row["note"] = f"note failed: {err}"
    floor = rows.get("bare", {}).get("latency_us")
    eager = rows.get("cupy", {}).get("latency_us")
    for row in rows.values():
        if row.get("latency_us"):
            row["ratio_to_bare_graph"] = row["latency_us"] / floor if floor else None
            row["speedup_over_eager"] = eager / row["latency_us"] if eager else None
    return list(rows.values())


def run_capture() -> dict:
    """Time and pool memory to capture all default sizes of `stencil`, against the largest alone."""
    import cupy

    import cupygraph as cg
    from cupygraph.demo import make_heat_cupy

    fn = make_heat_cupy(steps=HEAT_STEPS)
    example = cupy.asarray(random_inputs([(1, GRID, GRID)], seed=5)[0])
    fn(example)  # NVRTC compile outside the timed region
    sync = cupy.cuda.Device().synchronize
    sync()
    sizes = cg.CUDAGraphConfig().cudagraph_capture_sizes
    alone = cg.jit(fn, config=dict(capture_sizes=[sizes[-1]]))
    start = time.perf_counter()
    alone.warmup(example, progress=False)
    sync()
    largest_s, largest_bytes = time.perf_counter() - start, alone.registry.backend.pool_bytes()
    alone.clear()
    del alone
    many = cg.jit(fn)
    start = time.perf_counter()
    count = many.warmup(example, progress=False)
    sync()
    all_s, all_bytes = time.perf_counter() - start, many.registry.backend.pool_bytes()
    for n, x in zip((3, 300), random_inputs([(3, GRID, GRID), (300, GRID, GRID)], seed=6)):
        x = cupy.asarray(x)
        if not np.array_equal(cupy.asnumpy(many(x)), cupy.asnumpy(fn(x))):
            raise ValueError(f"replay of B={n} differs from eager CuPy")
    fallbacks = many.stats().fallbacks
    many.clear()
    return dict(workload="capture", sizes=len(sizes), largest_size=sizes[-1], graphs=count, capture_all_s=all_s,
                capture_largest_s=largest_s, time_ratio=all_s / largest_s if largest_s else None,
                pool_bytes_all=all_bytes, pool_bytes_largest=largest_bytes,
                memory_ratio=all_bytes / largest_bytes if largest_bytes else float("nan"), fallbacks=fallbacks)


def run_workload(name: str, frameworks: Frameworks, keys: list[str],
                 settings: dict) -> tuple[list[dict], dict[str, list[str]], Optional[dict]]:
    """(rows, notes by workload, capture figures or None) of one workload of WORKLOAD_NAMES."""
    rows: list[dict] = []
    if name == "capture":
        try:
            capture = run_capture()
        except Exception as err:
            capture = dict(workload="capture", error=_error_text(err))
        return rows, {"capture": ["All default capture sizes of stencil (B=1..512, 32 steps) captured with "
                                  "jit(...).warmup() into one pool, against the largest size captured alone."]}, capture
    if name == "serving":
        workload = WORKLOADS["stencil"]
        sizes = serving_sizes()
        case = Case(workload, None, [workload.shape(n) for n in sizes], seed=7, frameworks=frameworks)
        rows = run_case(case, [k for k in SERVING_COMPETITORS if k in keys], settings, serving=True)
        del case
        frameworks.release_memory()
        return rows, {"stencil-serving": [
            f"B drawn geometric (p=0.05) between 1 and {SERVING_MAX_BATCH}, {len(sizes)} calls rotating, "
            f"{len(set(sizes))} distinct sizes; cupygraph pads to its {SERVING_MAX_BATCH}-bounded capture sizes "
            "(captured ahead with warmup, in setup); torch.compile uses dynamic=None and records one graph per "
            "distinct shape (all recorded in setup).",
            "No bare CuPy graph, torch.cuda.CUDAGraph or jax.jit here: a hand-captured graph needs one capture "
            "and one set of static buffers per distinct B (or padding and dispatch, which is what cupygraph is), "
            "and jax.jit recompiles for every new shape.",
        ]}, None
    workload = WORKLOADS[name]
    why_not = piecewise_unavailable() if name == "piecewise" else None
    if why_not:
        return rows, {name: [why_not]}, None
    for i, size in enumerate(workload.sizes(settings["quick"])):
        case = Case(workload, size, [workload.shape(size)] * 4, seed=100 + i, frameworks=frameworks)
        rows += run_case(case, keys, settings)
        del case
        frameworks.release_memory()
    return rows, {name: [workload.fusion_note, f"tolerance for PyTorch and JAX: {workload.tolerance()}"]}, None


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="reduced sizes and repetitions (about 2 minutes)")
    parser.add_argument("--out", type=Path, help="write every row, the environment and the settings as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown tables here")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help=f"write {bench_report.PLOT_FILE} (latency vs size) here")
    parser.add_argument("--workloads", default=",".join(WORKLOAD_NAMES),
                        help=f"comma-separated subset of {','.join(WORKLOAD_NAMES)} (default: all)")
    parser.add_argument("--skip", default="", help=f"competitors to leave out, of {','.join(list(COMPETITORS)[1:])}")
    parser.add_argument("--reps", type=int, help="latency repetitions per competitor (default 150 quick, 1000 full)")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of competitors that fail")
    args = parser.parse_args(argv)
    args.workload_list = [w for w in args.workloads.split(",") if w]
    args.skip_list = [k for k in args.skip.split(",") if k]
    for w in args.workload_list:
        if w not in WORKLOAD_NAMES:
            parser.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOAD_NAMES)}")
    for k in args.skip_list:
        if k not in COMPETITORS or k == "cupy":
            parser.error(f"cannot skip {k!r}; choose from {', '.join(list(COMPETITORS)[1:])} "
                         "(eager CuPy is the reference)")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    reps = args.reps or (150 if args.quick else 1000)
    settings = dict(quick=args.quick, reps=reps, rounds=3 if args.quick else 10, batch=50,
                    warmup=10 if args.quick else 30, verbose=args.verbose, skip=args.skip_list)
    try:
        frameworks = Frameworks(load_torch=not {"torch", "torch-graph", "torch-compile"} <= set(args.skip_list),
                                load_jax="jax" not in args.skip_list)
    except Exception as err:  # no CuPy, or no GPU behind it
        print(f"bench.py needs CuPy and a GPU: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    env = frameworks.environment()
    cli_args = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python tools/bench.py", *(shlex.quote(a) for a in cli_args)])
    print(bench_report.header(env), flush=True)
    keys = [k for k in COMPETITORS if k not in args.skip_list]
    rows: list[dict] = []
    notes: dict[str, list[str]] = {}
    capture: Optional[dict] = None
    began = time.perf_counter()
    for name in args.workload_list:
        start = time.perf_counter()
        try:
            new, new_notes, new_capture = run_workload(name, frameworks, keys, settings)
        except Exception as err:  # eager CuPy itself failed, say: the other workloads still run
            traceback.print_exc()
            new, new_notes, new_capture = [], {name: [f"workload failed: {_error_text(err)}"]}, None
        notes.update(new_notes)
        capture = new_capture or capture
        rows += new
        print(f"[{name}: {time.perf_counter() - start:.1f} s]", flush=True)
        for workload_name in bench_report.ordered(r["workload"] for r in new):
            table = bench_report.workload_table([r for r in new if r["workload"] == workload_name])
            print(f"\n## {workload_name}\n" + table)
        if new_capture is not None:
            print("\n## capture\n" + bench_report.capture_table(new_capture))
        if not new and new_capture is None:  # skipped or failed: say why
            for note in new_notes.get(name, []):
                print(f"{name}: {note}")
        print(flush=True)
    settings["total_s"] = time.perf_counter() - began
    print(f"total {settings['total_s']:.1f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(environment=env, command=command, settings=settings,
                                            method=bench_report.METHOD, results=rows, capture=capture, notes=notes),
                                       indent=2, default=str))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(bench_report.markdown(env, rows, notes, capture, command))
    if args.plots:
        try:
            for path in bench_report.write_plots(rows, args.plots):
                print(f"plot: {path}")
        except Exception as err:
            print(f"plots failed: {_error_text(err)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
