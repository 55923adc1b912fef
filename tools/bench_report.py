#!/usr/bin/env python3
"""Reporting for ``tools/bench.py``: the environment, tables, the results page and the plots.

Works on plain result rows (dicts), so it needs neither a GPU nor CuPy; matplotlib is imported
only when plots are asked for. Run as a script, it regenerates the results page and plots from
the JSON a GPU run wrote:

    python3 tools/bench_report.py bench.json [--control-flow control_flow.json]
                                  [--markdown benchmarks/RESULTS.md] [--plots benchmarks] [--label TEXT]
                                  [--run 'ID|STARTED|CARD|COMMAND|GAVE' ...] [--remark TEXT ...]

The page opens with a table of runs (the JSON's, then each ``--run``); every table names its run.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import numpy as np

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.bench_headline import headline, peer_wins, targets

PLOT_PREFIX = "bench_"  # one PNG per workload: bench_<workload>.png


def _version(module: Any, error: Optional[str]) -> str:
    if module is None:
        return f"unavailable ({error})" if error else "not loaded"
    return str(getattr(module, "__version__", "?"))


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except Exception:  # no nvidia-smi: the CUDA driver API version below still says something
        return "?"


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{value % 1000 // 10}"


def environment(cupy: Any, index: int = 0, torch: Any = None, jax: Any = None, jax_device: Any = None,
                errors: Optional[dict] = None) -> dict:
    """Card, driver, CUDA and library versions, device pinning, date: what every figure must carry."""
    errors = errors or {}
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(index)
    name = props["name"]
    env = dict(
        card=name.decode() if isinstance(name, bytes) else str(name),
        gpus_on_host=runtime.getDeviceCount(),
        pinned_device=index,
        driver=_driver_version(),
        cuda_driver_api=_cuda_version(runtime.driverGetVersion()),
        cuda_runtime=_cuda_version(runtime.runtimeGetVersion()),
        cupy=cupy.__version__,
        torch=_version(torch, errors.get("torch")),
        jax=_version(jax, errors.get("jax")),
        numpy=np.__version__,
        python=platform.python_version(),
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
    )
    try:
        env["cupy_pci_bus_id"] = cupy.cuda.Device(index).pci_bus_id
    except Exception as err:
        env["cupy_pci_bus_id"] = f"? ({err})"
    if torch is not None:
        env["torch_cuda"] = str(getattr(torch.version, "cuda", "?"))
        env["torch_device"] = f"cuda:{torch.cuda.current_device()} ({torch.cuda.get_device_name(index)})"
    if jax_device is not None:
        env["jax_device"] = f"{jax_device} (local_hardware_id {getattr(jax_device, 'local_hardware_id', '?')})"
    return env


def header(env: dict) -> str:
    return " | ".join(f"{k}: {v}" for k, v in env.items())


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return ""
    return format(value, fmt)


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


TABLE_HEAD = ("| size | competitor | latency (µs) | IQR | GPU/call (µs) | IQR | issue/call (µs) "
              "| latency × bare | GPU × bare | speedup vs eager | setup (s) | graph MiB | max abs err |\n"
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def workload_table(rows: list[dict]) -> str:
    lines = [TABLE_HEAD]
    for r in rows:
        size = f"{r.get('axis', '')}={r['size']}" if r.get("size") is not None else "varied"
        if r.get("error"):
            lines.append(f"| {size} | {r['competitor']} | error: {_cell(r['error'])} |" + " |" * 10)
            continue
        graph_mib = r["graph_bytes"] / 2**20 if r.get("graph_bytes") is not None else None
        lines.append(
            f"| {size} | {r['competitor']} | {_num(r.get('latency_us'), '.1f')} "
            f"| {_num(r.get('latency_iqr_us'), '.1f')} "
            f"| {_num(r.get('gpu_us'), '.1f')} | {_num(r.get('gpu_iqr_us'), '.1f')} "
            f"| {_num(r.get('host_issue_us'), '.1f')} | {_num(r.get('ratio_to_bare_graph'), '.3f')} "
            f"| {_num(r.get('gpu_ratio_to_bare_graph'), '.3f')} | {_num(r.get('speedup_over_eager'), '.2f')} "
            f"| {_num(r.get('setup_s'), '.2f')} | {_num(graph_mib, '.2f')} | {_num(r.get('max_abs_err'), '.2g')} |"
        )
    noted = [f"- {r['competitor']} at {r.get('axis', '')}={r.get('size')}: {_cell(r['note'], 400)}"
             for r in rows if r.get("note") and not r.get("error")]
    return "\n".join(lines + (["", *noted] if noted else []))


def capture_table(cap: dict) -> str:
    if cap.get("error"):
        return f"error: {_cell(cap['error'], 400)}"
    return "\n".join([
        "| graphs | capture all (s) | per graph (ms) | largest alone (s) | pool all (MiB) "
        "| pool largest alone (MiB) | memory ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {cap['graphs']} | {cap['capture_all_s']:.3f} | {1e3 * cap['capture_all_s'] / max(1, cap['graphs']):.2f} "
        f"| {cap['capture_largest_s']:.3f} | {cap['pool_bytes_all'] / 2**20:.1f} "
        f"| {cap['pool_bytes_largest'] / 2**20:.1f} | {cap['memory_ratio']:.3f} |",
    ])


METHOD = (
    "Each competitor is checked against eager CuPy on fresh random data first (bit for bit for the CuPy "
    "graphs, cupygraph and the torch graph of the same RawKernels; np.allclose with the stated tolerance for "
    "PyTorch, JAX and the fused chain), then warmed up; setup (s) covers build, compile, capture and its first 3 "
    "calls and is outside every timed region. Timing is in rounds: in each round every competitor runs alone a "
    "latency block and a throughput block of consecutive calls (each block opened by 5 untimed calls), and the "
    "order of the competitors rotates from round to round. Latency: host clock around one call plus its "
    "framework's sync, the device idle before each call (cudaDeviceSynchronize); the block's figure is its "
    "median. Throughput: the block's calls back to back; issue/call is host time to issue them, GPU/call is a "
    "CUDA event pair around the block (JAX: host clock until the last result is ready, an upper bound). Tables "
    "give the median over blocks and the IQR over blocks. CuPy, PyTorch and JAX are pinned to one CUDA device "
    "(cupy.cuda.Device, torch.cuda.set_device, jax_default_device; CuPy's and PyTorch's current device is "
    "checked and restored before every block, since JAX's start-up can switch it). Graph memory is what each "
    "framework's own allocator holds for the graph, a sum of sizes that cannot go negative: the private "
    "CuPy pool (bare graphs, and the buffers of the torch graph of the same RawKernels), cupygraph's graph "
    "pool, the segments of torch's private graph pools in torch.cuda.memory_snapshot(), JAX's compiled "
    "temp + output bytes."
)


def _control_flow_table(cf: dict) -> str:
    labels = [("graph_while", "graph + device while"), ("eager", "(a) eager, host check"),
              ("graph_body", "(b) graphed body, host check"), ("jax", "(c) jax.lax.while_loop")]
    rows = cf.get("results") or []
    present = [(k, t) for k, t in labels if any(k in r for r in rows)]
    head = ["grid", "iterations"] + [f"{t} (ms)" for _, t in present] + ["(b) ÷ while", "(c) ÷ while"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ours = r["graph_while"]["median_ms"]
        cells = [f"{r['n']}²", str(r["graph_while"]["iterations"])]
        cells += [f"{r[k]['median_ms']:.2f}" if k in r else "—" for k, _ in present]
        cells += [f"{r['graph_body']['median_ms'] / ours:.2f}×",
                  f"{r['jax']['median_ms'] / ours:.2f}×" if "jax" in r else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merge(payloads: list[dict]) -> dict:
    """One payload from runs of the same settings on the same card (e.g. a workload in its own process)."""
    first = payloads[0]
    for other in payloads[1:]:
        for field in ("card", "driver", "cupy", "torch", "jax"):
            if other["environment"].get(field) != first["environment"].get(field):
                raise ValueError(f"cannot merge runs with different {field}: {first['environment'].get(field)!r} "
                                 f"and {other['environment'].get(field)!r}")
        for field in ("quick", "block", "rounds"):
            if other.get("settings", {}).get(field) != first.get("settings", {}).get(field):
                raise ValueError(f"cannot merge runs with different settings.{field}")
    merged = dict(first, results=[r for p in payloads for r in p["results"]], runs=[_run_of(p) for p in payloads],
                  commands=[p["command"] for p in payloads], complete=all(p.get("complete", True) for p in payloads),
                  capture=next((p["capture"] for p in payloads if p.get("capture")), None),
                  notes={k: v for p in payloads for k, v in p.get("notes", {}).items()},
                  why={k: v for p in payloads for k, v in p.get("why", {}).items()})
    return merged


def _run_of(payload: dict) -> dict:
    """What one tools/bench.py process ran: its command, start and workloads."""
    return {"command": payload["command"], "date": payload["environment"].get("date"),
            "workloads": ordered(r["workload"] for r in payload["results"])
            + (["capture"] if payload.get("capture") is not None else [])}


def parse_run(text: str) -> dict:
    """A ``--run`` row, ``ID|started (UTC)|card|command|what it gave``, for a run with no JSON given here."""
    parts = [part.strip() for part in text.split("|")]
    if len(parts) != 5 or not parts[0]:
        raise ValueError(f"--run needs 5 fields, ID|started (UTC)|card|command|what it gave; got {text!r}")
    return dict(zip(("id", "date", "card", "command", "gave"), parts))


def runs_table(payload: dict, control_flow: Optional[dict] = None, extra: Iterable[dict] = ()) -> list[dict]:
    """One row per run whose figures are on the page: the bench processes (R1, R2, ...), the control-flow
    run, then ``extra`` (``--run``) in the order given. Each row: id, date, card, command, gave."""
    env = payload["environment"]
    card = f"one {env.get('card')} (device {env.get('pinned_device', 0)} of {env.get('gpus_on_host', '?')} on the host)"
    rows = [dict(id=f"R{i}", date=run["date"], card=card, command=f"`{run['command']}`",
                 gave=", ".join(run["workloads"]), workloads=run["workloads"])
            for i, run in enumerate(payload.get("runs") or [_run_of(payload)], 1)]
    if control_flow:
        meta = control_flow.get("meta", {})
        rows.append(dict(id=f"R{len(rows) + 1}", date=meta.get("date"), card=str(meta.get("device")),
                         command=f"`{meta.get('command', 'python3 tools/bench_control_flow.py')}`",
                         gave="control flow (CG to tolerance)", workloads=["control flow"]))
    rows += [dict(run, workloads=[]) for run in extra]
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two runs have the same id: {ids}")
    return rows


def page(payload: dict, control_flow: Optional[dict] = None, label: str = "", plots: Iterable[str] = (),
         remarks: Iterable[str] = (), runs: Iterable[dict] = ()) -> str:
    """The results page (benchmarks/RESULTS.md) from one run's JSON, and optionally control_flow.json.

    A table of runs opens the page (``runs``: rows for runs whose JSON is not given here); every
    section and table then names the run it comes from.
    """
    env, rows, notes = payload["environment"], payload["results"], payload.get("notes", {})
    settings = payload.get("settings", {})
    kind = label or ("quick run" if settings.get("quick") else "full run")
    table = runs_table(payload, control_flow, runs)
    bench_runs = [r for r in table if r["workloads"] and r["workloads"] != ["control flow"]]
    run_of = {w: r for r in bench_runs for w in r["workloads"]}
    run_caption = lambda run: f"*Run {run['id']}: {run['card']}, {run['date']}.*"
    cf_run = next((r for r in table if r["workloads"] == ["control flow"]), None)
    bench_ids = ", ".join(r["id"] for r in bench_runs)
    out = ["# Benchmark results", "",
           "Each section and table below names the run that gave it.", "",
           "## Runs", "", "| run | started (UTC) | card | command | gave |", "| --- | --- | --- | --- | --- |",
           *[f"| {r['id']} | {str(r['date']).removesuffix(' UTC')} | {r['card']} | {r['command']} | {r['gave']} |"
             for r in table], "",
           f"{bench_ids}: one {kind} of "
           + " then ".join(f"`{c}`" for c in payload.get("commands", [payload["command"]]))
           + (" (one process each)" if len(payload.get("commands", [])) > 1 else "")
           + f" on **one {env.get('card')}** "
           f"(device {env.get('pinned_device', 0)} of {env.get('gpus_on_host', '?')} on the host), started "
           f"{env.get('date')}; driver {env.get('driver')}, CUDA runtime {env.get('cuda_runtime')}, CuPy "
           f"{env.get('cupy')}, PyTorch {env.get('torch')}, JAX {env.get('jax')}, Python {env.get('python')}. "
           f"Blocks of {settings.get('block')} calls, {settings.get('rounds')} rounds"
           + (f", leaving out: {', '.join(settings['skip'])}" if settings.get("skip") else "") + "."
           + ("" if payload.get("complete", True) else " **The run did not finish: only the workloads below ran.**"),
           ""]
    remarks = list(remarks)
    if remarks:
        out += ["## Notes on the runs", "", *[f"- {r}" for r in remarks], ""]
    out += ["## Method", "", METHOD, "", "## Headline", ""]
    for workload, sentences in headline(rows).items():
        out += [f"### {workload}", ""] + ([run_caption(run_of[workload]), ""] if workload in run_of else [])
        out += [f"- {s}" for s in sentences]
        why = payload.get("why", {}).get(workload)
        out += [f"- Why: {why}" if why else "", ""]
    wins = peer_wins(rows)
    if wins:
        out += ["## Where the peers win", "", f"*Runs {bench_ids}.*", "", *[f"- {w}" for w in wins], "",
                "torch.compile and XLA fuse the elementwise chains that our RawKernels keep as separate launches, "
                "so they do less GPU work per call; the rows 'torch.cuda.CUDAGraph, same RawKernels' and "
                "'cupygraph jit, fused' separate graph management from kernel count.", ""]
    out += ["## Targets", "", f"*Runs {bench_ids}" + (f"; the #6 rows: run {cf_run['id']}" if cf_run else "") + ".*",
            "", "| issue | target | measured (medians of this run: latency unless it says GPU time) | status |",
            "| --- | --- | --- | --- |"]
    for t in targets(rows, payload.get("capture"), control_flow):
        out.append(f"| {t.issue} | {t.text} | {t.measured} | {t.status} |")
    out.append("")
    plots = list(plots)
    if plots:
        out += ["## Plots", "", f"*Runs {bench_ids}.*", "", *[f"![{Path(p).stem}]({p})" for p in plots], ""]
    out += ["## Full tables", "", header(env), ""]
    for workload in ordered(r["workload"] for r in rows):
        out += [f"### {workload}", ""] + ([run_caption(run_of[workload]), ""] if workload in run_of else [])
        out += [workload_table([r for r in rows if r["workload"] == workload]), ""]
        out += [f"- {note}" for note in notes.get(workload, [])] + [""]
    for workload in notes:
        if not any(r["workload"] == workload for r in rows) and workload != "capture":
            out += [f"### {workload}", ""] + [f"- {note}" for note in notes[workload]] + [""]
    if payload.get("capture") is not None:
        out += ["### capture", ""] + ([run_caption(run_of["capture"]), ""] if "capture" in run_of else [])
        out += [capture_table(payload["capture"]), ""]
        out += [f"- {n}" for n in notes.get("capture", [])] + [""]
    if control_flow:
        out += ["### control flow: CG to tolerance (`tools/bench_control_flow.py`)", ""]
        out += ([run_caption(cf_run), ""] if cf_run else []) + [_control_flow_table(control_flow), ""]
    return "\n".join(out)


def ordered(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def write_plots(rows: list[dict], directory: Path) -> list[Path]:
    """One PNG per workload with a size axis: latency (left) and GPU time per call (right) against size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    good = [r for r in rows if not r.get("error") and r.get("size") is not None and r.get("latency_us")]
    # One colour and marker per competitor across every figure (eleven competitors: more than one colour cycle).
    palette = plt.get_cmap("tab20").colors
    markers = "osD^v<>pP*Xh"
    styles = {label: (palette[2 * i % 20 + (2 * i // 20) % 2], markers[i % len(markers)])
              for i, label in enumerate(ordered(r["competitor"] for r in good))}
    paths = []
    for workload in ordered(r["workload"] for r in good):
        mine = [r for r in good if r["workload"] == workload]
        fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
        for ax, (metric, ylabel) in zip(axes, (("latency", "latency per call (µs, synchronised)"),
                                               ("gpu", "back-to-back GPU time per call (µs)"))):
            for label in ordered(r["competitor"] for r in mine):
                points = sorted((r["size"], r[f"{metric}_us"], r.get(f"{metric}_q1_us"), r.get(f"{metric}_q3_us"))
                                for r in mine if r["competitor"] == label and r.get(f"{metric}_us"))
                if not points:
                    continue
                xs, ys = [p[0] for p in points], [p[1] for p in points]
                lows = [p[1] - p[2] if p[2] is not None else 0.0 for p in points]
                highs = [p[3] - p[1] if p[3] is not None else 0.0 for p in points]
                color, marker = styles[label]
                ax.errorbar(xs, ys, yerr=[lows, highs], marker=marker, color=color, capsize=3, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel(mine[0].get("axis", "size"))
            ax.set_ylabel(ylabel)
        axes[0].set_title(f"{workload}: latency (median over blocks, IQR bars)")
        axes[1].set_title(f"{workload}: GPU time per call (JAX: upper bound)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize="small")
        fig.tight_layout(rect=(0, 0.14, 1, 1))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{PLOT_PREFIX}{workload}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path, nargs="+", help="the JSON tools/bench.py --out wrote (several: "
                        "runs of the same settings on the same card, e.g. a workload run in its own process)")
    parser.add_argument("--control-flow", type=Path, help="the JSON tools/bench_control_flow.py --out wrote")
    parser.add_argument("--markdown", type=Path, help="write the results page here (default: print it)")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="write one PNG per workload here (matplotlib)")
    parser.add_argument("--label", default="", help="what run this was, e.g. 'quick run' (default from the JSON)")
    parser.add_argument("--remark", action="append", default=[], help="a note on the runs (repeatable)")
    parser.add_argument("--run", action="append", default=[], metavar="ID|STARTED|CARD|COMMAND|GAVE",
                        help="a row of the table of runs for a run whose JSON is not given here (repeatable)")
    args = parser.parse_args(argv)
    try:
        payload = merge([json.loads(path.read_text()) for path in args.json])
        control_flow = json.loads(args.control_flow.read_text()) if args.control_flow else None
        runs = [parse_run(text) for text in args.run]
    except (OSError, ValueError, KeyError) as err:
        parser.error(f"cannot read the results: {err}")
    plots: list[str] = []
    if args.plots:
        try:
            written = write_plots(payload["results"], args.plots)
        except ImportError as err:
            print(f"plots skipped: {err}", file=sys.stderr)
        else:
            base = args.markdown.parent if args.markdown else Path.cwd()
            plots = [str(p.resolve().relative_to(base.resolve())) if p.resolve().is_relative_to(base.resolve())
                     else str(p) for p in written]
    try:
        text = page(payload, control_flow, args.label, plots, args.remark, runs)
    except ValueError as err:
        parser.error(str(err))
    if args.markdown:
        args.markdown.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
