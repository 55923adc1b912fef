#!/usr/bin/env python3
"""Benchmark cupygraph against the alternatives a user would pick, on one GPU, in one process.

Competitors (each workload; see bench_peers.COMPETITORS): eager CuPy; a bare hand-captured CuPy
graph at the exact size (the floor: one input memcpy and one launch, no output copy) and the same
with an owned output copy; cupygraph ``jit`` with copied and with view outputs; on the chain, a
fused variant inside cupygraph (one ElementwiseKernel); ``torch.cuda.CUDAGraph`` capturing the very
same CuPy RawKernels (graph management alone); PyTorch eager; ``torch.cuda.CUDAGraph`` on torch
ops; ``torch.compile(mode="reduce-overhead")``; ``jax.jit``. Workloads: chain, chain-rawmodule (the
same chain, its kernels from plain ``cupy.RawModule``, each waiting: issue 30's PDL chain), stencil
(fixed B and a serving run with varied B), mlp, piecewise, capture (see tools/bench_workloads.py).
At the end it prints the issues' targets the run measured (tools/bench_headline.py).

Every competitor is checked against eager CuPy first; one that fails to build, compile or match
is reported as an error row and the run goes on. Timing: tools/bench_method.py (each competitor
alone in rotated blocks of consecutive calls); reporting: tools/bench_report.py.

    python3 tools/bench.py [--quick] [--out results.json] [--markdown results.md] [--plots DIR]
                           [--workloads chain,stencil,...] [--skip torch-compile,jax,...] [--device 0]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_report
from tools.bench_cupy import CUPY_KEYS, build_cupy
from tools.bench_headline import measured_targets
from tools.bench_method import MIN_BLOCK, MIN_ROUNDS, Schedule, measure
from tools.bench_peers import COMPETITORS, TORCH_KEYS, Competitor, Frameworks, NotApplicable, peer_builders
from tools.bench_workloads import (
    GRID,
    HEAT_STEPS,
    SERVING_MAX_BATCH,
    WORKLOADS,
    Workload,
    piecewise_unavailable,
    random_inputs,
    serving_sizes,
)

__all__ = ["Case", "main", "run_case"]

WORKLOAD_NAMES = ("chain", "chain-rawmodule", "stencil", "serving", "mlp", "piecewise", "capture", "zero-copy")
SERVING_COMPETITORS = ("cupy", "jit-copy", "jit-view", "torch", "torch-compile")
SETUP_CALLS = 3  # calls counted into setup_s (torch.compile needs >= 3 to record its graph)
FULL_ROUNDS = 7
# PyTorch eager is 10-40x slower than every graph row and nobody's graph alternative: the quick
# run, which must fit in 2 minutes, leaves it to the full run.
QUICK_SKIPS = ("torch",)
QUICK_SERVING_SKIPS = ("torch-compile",)


class Case:
    """One workload at one size (or the serving mix): inputs and weights for every framework."""

    def __init__(self, workload: Workload, size: Optional[int], shapes: list[tuple[int, ...]], seed: int,
                 frameworks: Frameworks):
        self.workload, self.size, self.frameworks = workload, size, frameworks
        self.host_inputs = random_inputs(shapes, seed)
        self.host_params = workload.params()
        cupy_fw = frameworks.get("cupy")
        self.cupy_inputs = [cupy_fw.upload(a) for a in self.host_inputs]
        self.cupy_params = [cupy_fw.upload(p) for p in self.host_params]
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


def build(case: Case, key: str, serving: bool) -> Competitor:
    if key in CUPY_KEYS:
        sizes = dict(max_capture_size=SERVING_MAX_BATCH) if serving else dict(capture_sizes=[case.size])
        return build_cupy(case, key, serving, sizes)
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


def _error_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text if len(text) < 600 else text[:600] + " …"


def _prepare(case: Case, key: str, serving: bool, settings: dict, refs: list, row: dict) -> Competitor:
    """Build, set up (timed into setup_s), check against eager CuPy, warm up; fill the row's setup fields."""
    fws = case.frameworks
    start = time.perf_counter()
    c = build(case, key, serving)
    for x in (c.inputs if serving and key == "torch-compile" else c.inputs[:1]) * SETUP_CALLS:
        c.fw.finish(c.call(x))  # compile / capture / record; every shape of the mix for torch.compile
    fws.device_sync()
    row["setup_s"] = time.perf_counter() - start
    row["tolerance"] = "bit for bit" if c.exact else case.workload.tolerance()
    # The second input first: a graph that wrote nothing would still hold the first input's result.
    order = list(range(len(refs)))[::-1]
    row["max_abs_err"] = check(c, [c.inputs[i] for i in order], [refs[i] for i in order], case.workload)
    for i in range(settings["warmup"]):
        c.fw.finish(c.call(c.inputs[i % len(c.inputs)]))
    fws.device_sync()
    try:
        row["graph_bytes"] = c.graph_bytes() if c.graph_bytes else None
        row["memory_method"] = c.memory_method or None
    except Exception as err:  # a memory figure we cannot read is missing, not a failed competitor
        row["graph_bytes"], row["memory_method"] = None, f"not measured: {_error_text(err)}"
    row["method"] = c.fw.method
    return c


def run_case(case: Case, keys: list[str], settings: dict, serving: bool = False) -> tuple[list[dict], list[str]]:
    """Build, check, warm up and time every competitor on one case: (one row each, notes)."""
    fws = case.frameworks
    fws.pin()
    began = time.perf_counter()
    cupy_fw = fws.get("cupy")
    checked = 3 if serving else 2
    refs = [cupy_fw.to_numpy(case.eager(x, *case.cupy_params)) for x in case.cupy_inputs[:checked]]
    base = dict(workload=case.workload.name + ("-serving" if serving else ""), axis=case.workload.axis,
                size=case.size, shape="varied" if serving else list(case.host_inputs[0].shape))
    if serving:
        base["sizes"] = [int(a.shape[0]) for a in case.host_inputs]
    rows: dict[str, dict] = {}
    ready: list[Competitor] = []
    notes: list[str] = []
    for key in keys:
        row = dict(base, competitor=COMPETITORS[key], key=key)
        try:
            ready.append(_prepare(case, key, serving, settings, refs, row))
        except NotApplicable as why:
            notes.append(f"{COMPETITORS[key]}: not applicable: {why}")
            continue
        except Exception as err:
            row["error"] = _error_text(err)
            if settings.get("verbose"):
                traceback.print_exc()
        rows[key] = row
    figures, errors = measure(ready, settings["schedule"], fws.device_sync, pin=fws.pin)
    for c in ready:
        row = rows[c.key]
        row.update(figures.get(c.key, {}))
        if c.key in errors:
            row["error"] = errors[c.key]
        try:
            row["note"] = c.note()
        except Exception as err:
            row["note"] = f"note failed: {err}"
    add_ratios(list(rows.values()))
    label = "serving mix" if serving else f"{case.workload.axis}={case.size}"
    print(f"  {case.workload.name} {label}: {len(ready)} competitors built and timed in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    return list(rows.values()), notes


def add_ratios(rows: list[dict]) -> None:
    """Ratios of medians, within one case: to the bare graph (latency, GPU time) and to eager CuPy."""
    by_key = {r["key"]: r for r in rows if not r.get("error")}
    bare, eager = by_key.get("bare", {}), by_key.get("cupy", {})
    for row in by_key.values():
        if row.get("latency_us"):
            row["ratio_to_bare_graph"] = row["latency_us"] / bare["latency_us"] if bare.get("latency_us") else None
            row["gpu_ratio_to_bare_graph"] = row["gpu_us"] / bare["gpu_us"] if bare.get("gpu_us") else None
            row["speedup_over_eager"] = eager["latency_us"] / row["latency_us"] if eager.get("latency_us") else None


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
    largest_s, largest_bytes = time.perf_counter() - start, alone.backend.pool_bytes()
    alone.clear()
    del alone
    many = cg.jit(fn)
    start = time.perf_counter()
    count = many.warmup(example, progress=False)
    sync()
    all_s, all_bytes = time.perf_counter() - start, many.backend.pool_bytes()
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


def _run_cases(cases: list[tuple[Any, ...]], frameworks: Frameworks, keys: list[str], settings: dict,
               serving: bool = False) -> tuple[list[dict], list[str]]:
    """Run (workload, size, shapes, seed) cases in order; rows of finished cases survive a failing one.

    A case that fails outside a competitor (eager CuPy itself, or a CUDA error that poisons the
    context and surfaces in the sync after the case) ends the workload: later cases would only
    report the same error.
    """
    rows: list[dict] = []
    notes: list[str] = []
    for workload, size, shapes, seed in cases:
        label = "the serving mix" if serving else f"{workload.axis}={size}"
        try:
            case = Case(workload, size, shapes, seed=seed, frameworks=frameworks)
            new_rows, case_notes = run_case(case, keys, settings, serving=serving)
            rows += new_rows
            notes += [n for n in case_notes if n not in notes]
            del case
            frameworks.release_memory()
            frameworks.device_sync()  # a fault inside this case surfaces here, not in the next one
        except Exception as err:
            if settings.get("verbose"):
                traceback.print_exc()
            notes.append(f"case {label} failed and ended this workload: {_error_text(err)}")
            print(f"  {workload.name} {label} failed: {_error_text(err)}", flush=True)
            break
    return rows, notes


def run_workload(name: str, frameworks: Frameworks, keys: list[str],
                 settings: dict) -> tuple[list[dict], dict[str, list[str]], Optional[dict]]:
    """(rows, notes by workload, capture figures or None) of one workload of WORKLOAD_NAMES."""
    if name == "capture":
        try:
            capture = run_capture()
        except Exception as err:
            capture = dict(workload="capture", error=_error_text(err))
        return [], {"capture": ["All default capture sizes of stencil (B=1..512, 32 steps) captured with "
                                "jit(...).warmup() into one pool, against the largest size captured alone."]}, capture
    if name == "zero-copy":  # issue 14's figures: tools/bench_zero_copy.py, in this process
        from tools import bench_zero_copy

        try:
            lines = bench_zero_copy.summary(bench_zero_copy.measure(settings["quick"]))
        except Exception as err:
            lines = [f"failed: {_error_text(err)}"]
        return [], {"zero-copy": lines}, None
    if name == "serving":
        workload = WORKLOADS["stencil"]
        sizes = serving_sizes(count=16 if settings["quick"] else 64)
        serving_keys = [k for k in SERVING_COMPETITORS if k in keys
                        and not (settings["quick"] and k in QUICK_SERVING_SKIPS)]
        rows, case_notes = _run_cases([(workload, None, [workload.shape(n) for n in sizes], 7)], frameworks,
                                      serving_keys, settings, serving=True)
        quick_note = (["--quick leaves torch.compile out of the serving mix: recording one graph per distinct "
                       "shape takes it about 25 s; the full run has it."] if settings["quick"] else [])
        return rows, {"stencil-serving": [
            f"B drawn geometric (p=0.05) between 1 and {SERVING_MAX_BATCH}, {len(sizes)} inputs rotating, "
            f"{len(set(sizes))} distinct sizes; cupygraph pads to its {SERVING_MAX_BATCH}-bounded capture sizes "
            "(captured ahead with warmup, in setup); torch.compile uses dynamic=None and records one graph per "
            "distinct shape (all recorded in setup).",
            "No bare CuPy graph, torch.cuda.CUDAGraph or jax.jit here: a hand-captured graph needs one capture "
            "and one set of static buffers per distinct B (or padding and dispatch, which is what cupygraph is), "
            "and jax.jit recompiles for every new shape.",
            *quick_note, *case_notes,
        ]}, None
    workload = WORKLOADS[name]
    why_not = piecewise_unavailable() if name == "piecewise" else None
    if why_not:
        return [], {name: [why_not]}, None
    sizes = workload.sizes(settings["quick"])
    cases = [(workload, size, [workload.shape(size)] * 4, 100 + i) for i, size in enumerate(sizes)]
    rows, case_notes = _run_cases(cases, frameworks, keys, settings)
    notes = [workload.fusion_note, f"tolerance for PyTorch, JAX and the fused row: {workload.tolerance()}"]
    return rows, {name: notes + case_notes}, None


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes, no PyTorch eager unless --skip is given (under 2 minutes on an H100/H200)")
    parser.add_argument("--out", type=Path, help="write every row, the environment and the settings as JSON here "
                        "(rewritten after each workload; 'complete' says whether the run finished)")
    parser.add_argument("--markdown", type=Path, help="write the results page here (tools/bench_report.py can "
                        "also make it later from the JSON)")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="write one PNG per workload here (needs matplotlib)")
    parser.add_argument("--workloads", default=",".join(WORKLOAD_NAMES),
                        help=f"comma-separated subset of {','.join(WORKLOAD_NAMES)} (default: all)")
    parser.add_argument("--skip", default=None, help=f"competitors to leave out, of {','.join(list(COMPETITORS)[1:])} "
                        f"(default: none; with --quick: {','.join(QUICK_SKIPS)})")
    parser.add_argument("--device", type=int, default=0, help="CUDA device every framework is pinned to (default 0)")
    parser.add_argument("--block", type=int, default=MIN_BLOCK, help=f"calls per block (default {MIN_BLOCK})")
    parser.add_argument("--rounds", type=int, help=f"rounds of blocks (default {MIN_ROUNDS} quick, {FULL_ROUNDS} full)")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of competitors that fail")
    args = parser.parse_args(argv)
    args.workload_list = [w for w in args.workloads.split(",") if w]
    skip = args.skip if args.skip is not None else (",".join(QUICK_SKIPS) if args.quick else "")
    args.skip_list = [k for k in skip.split(",") if k]
    for w in args.workload_list:
        if w not in WORKLOAD_NAMES:
            parser.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOAD_NAMES)}")
    for k in args.skip_list:
        if k not in COMPETITORS or k == "cupy":
            parser.error(f"cannot skip {k!r}; choose from {', '.join(list(COMPETITORS)[1:])} "
                         "(eager CuPy is the reference)")
    rounds = args.rounds if args.rounds is not None else (MIN_ROUNDS if args.quick else FULL_ROUNDS)
    try:
        args.schedule = Schedule(block=args.block, rounds=rounds)
    except ValueError as err:
        parser.error(f"--block/--rounds: {err}")
    if args.device < 0:
        parser.error(f"--device must be a CUDA device index >= 0, got {args.device}")
    return args


def _write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    schedule: Schedule = args.schedule
    settings = dict(quick=args.quick, schedule=schedule, warmup=10 if args.quick else 30, verbose=args.verbose)
    try:
        frameworks = Frameworks(load_torch=not set(TORCH_KEYS) <= set(args.skip_list),
                                load_jax="jax" not in args.skip_list, index=args.device)
    except Exception as err:  # no CuPy, or no GPU behind it
        print(f"bench.py needs CuPy and a GPU: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    env = frameworks.environment()
    cli_args = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python3 tools/bench.py", *(shlex.quote(a) for a in cli_args)])
    print(bench_report.header(env), flush=True)
    keys = [k for k in COMPETITORS if k not in args.skip_list]
    public_settings = dict(quick=args.quick, block=schedule.block, rounds=schedule.rounds, lead_in=schedule.lead_in,
                           warmup=settings["warmup"], skip=args.skip_list, device=args.device)
    payload: dict[str, Any] = dict(environment=env, command=command, settings=public_settings,
                                   method=bench_report.METHOD, results=[], capture=None, notes={}, why={},
                                   complete=False)
    began = time.perf_counter()
    for name in args.workload_list:
        start = time.perf_counter()
        try:
            new, new_notes, new_capture = run_workload(name, frameworks, keys, settings)
        except Exception as err:  # eager CuPy itself failed, say: the other workloads still run
            traceback.print_exc()
            new, new_notes, new_capture = [], {name: [f"workload failed: {_error_text(err)}"]}, None
        payload["notes"].update(new_notes)
        for workload_name in {r["workload"] for r in new}:
            payload["why"][workload_name] = WORKLOADS[workload_name.removesuffix("-serving")].fusion_note
        payload["capture"] = new_capture or payload["capture"]
        payload["results"] += new
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
        public_settings["total_s"] = time.perf_counter() - began
        public_settings["device_restores"] = frameworks.restores
        if args.out:
            _write_json(args.out, payload)
    payload["complete"] = True
    print(measured_targets(payload["results"], payload.get("capture")), flush=True)
    print(f"total {public_settings['total_s']:.1f} s; pinned device {args.device} restored "
          f"{frameworks.restores} time(s)")
    if args.out:
        _write_json(args.out, payload)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(bench_report.page(payload))
    if args.plots:
        try:
            for path in bench_report.write_plots(payload["results"], args.plots):
                print(f"plot: {path}")
        except Exception as err:
            print(f"plots failed: {_error_text(err)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
