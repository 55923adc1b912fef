"""Reporting for ``tools/bench.py``: the environment header, Markdown tables and PNG plots.

Works on plain result rows (dicts), so it needs neither a GPU nor CuPy; matplotlib is imported
only when plots are asked for.
"""

from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import numpy as np

PLOTTED = ("chain", "stencil", "mlp", "piecewise")  # workloads with a size axis
PLOT_FILE = "bench_latency.png"


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


def environment(cupy: Any, torch: Any = None, jax: Any = None, errors: Optional[dict] = None) -> dict:
    """Card, driver, CUDA and library versions, date: what every published figure must carry."""
    errors = errors or {}
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    env = dict(
        card=name.decode() if isinstance(name, bytes) else str(name),
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
    if torch is not None:
        env["torch_cuda"] = str(getattr(torch.version, "cuda", "?"))
    if jax is not None:
        try:
            env["jax_device"] = str(jax.devices()[0])
        except Exception as err:
            env["jax_device"] = f"? ({err})"
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


TABLE_HEAD = ("| size | competitor | latency median (µs) | IQR (µs) | issue/call (µs) | GPU/call (µs) "
              "| × bare graph | speedup vs eager | setup (s) | graph MiB | max abs err |\n"
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def workload_table(rows: list[dict]) -> str:
    lines = [TABLE_HEAD]
    for r in rows:
        size = f"{r.get('axis', '')}={r['size']}" if r.get("size") is not None else str(r.get("sizes_label", "varied"))
        if r.get("error"):
            lines.append(f"| {size} | {r['competitor']} | error: {_cell(r['error'])} |" + " |" * 8)
            continue
        graph_mib = r["graph_bytes"] / 2**20 if r.get("graph_bytes") is not None else None
        lines.append(
            f"| {size} | {r['competitor']} | {_num(r.get('latency_us'), '.1f')} "
            f"| {_num(r.get('latency_iqr_us'), '.1f')} "
            f"| {_num(r.get('host_issue_us'), '.1f')} | {_num(r.get('gpu_us'), '.1f')} "
            f"| {_num(r.get('ratio_to_bare_graph'), '.3f')} | {_num(r.get('speedup_over_eager'), '.2f')} "
            f"| {_num(r.get('setup_s'), '.2f')} | {_num(graph_mib, '.1f')} | {_num(r.get('max_abs_err'), '.2g')} |"
        )
    noted = [f"- {r['competitor']} at {r.get('axis', '')}={r.get('size')}: {_cell(r['note'], 400)}"
             for r in rows if r.get("note") and not r.get("error")]
    return "\n".join(lines + (["", *noted] if noted else []))


def capture_table(cap: dict) -> str:
    if cap.get("error"):
        return f"error: {_cell(cap['error'], 400)}"
    return "\n".join([
        "| graphs | capture all (s) | per graph (ms) | largest alone (s) | pool all (MiB) "
        "| pool largest alone (MiB) | memory ratio | targets (< 1 s, ≤ 1.25×) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {cap['graphs']} | {cap['capture_all_s']:.3f} | {1e3 * cap['capture_all_s'] / max(1, cap['graphs']):.2f} "
        f"| {cap['capture_largest_s']:.3f} | {cap['pool_bytes_all'] / 2**20:.1f} "
        f"| {cap['pool_bytes_largest'] / 2**20:.1f} | {cap['memory_ratio']:.3f} "
        f"| {'met' if cap['capture_all_s'] < 1.0 else 'missed'} "
        f"/ {'met' if cap['memory_ratio'] <= 1.25 else 'missed'} |",
    ])


METHOD = (
    "Method: one process, one card. Every competitor is checked against eager CuPy on fresh random "
    "data first (bit for bit for CuPy graphs and cupygraph; np.allclose with the stated tolerance for "
    "PyTorch and JAX), then warmed up; setup (s) is the time from nothing to its 3rd call done "
    "(compilation, capture, warm-up) and is outside every timed region. Latency: host clock around one "
    "call plus its sync (CuPy/PyTorch: stream synchronize; JAX: block_until_ready), device idle before "
    "each call, competitors interleaved and rotated each repetition; median and IQR. Throughput: rounds "
    "of back-to-back calls; issue/call is host time to issue them, GPU/call is CUDA events around the "
    "round (JAX: host clock until the last result is ready, an upper bound). × bare graph and speedup "
    "vs eager are ratios of latency medians."
)


def markdown(env: dict, rows: list[dict], notes: dict[str, list[str]], capture: Optional[dict],
             command: str) -> str:
    out = ["# cupygraph benchmark", "", f"Command: `{command}`", "", header(env), "", METHOD, ""]
    for workload in ordered(r["workload"] for r in rows):
        out += [f"## {workload}", "", workload_table([r for r in rows if r["workload"] == workload]), ""]
        out += [f"- {note}" for note in notes.get(workload, [])]
        out.append("")
    for workload in notes:
        if not any(r["workload"] == workload for r in rows) and workload != "capture":
            out += [f"## {workload}", ""] + [f"- {note}" for note in notes[workload]] + [""]
    if capture is not None:
        out += ["## capture", "", capture_table(capture), ""] + [f"- {n}" for n in notes.get("capture", [])] + [""]
    return "\n".join(out)


def ordered(names: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen


def write_plots(rows: list[dict], directory: Path) -> list[Path]:
    """One PNG: per workload a column, latency (top) and back-to-back GPU time (bottom) vs size, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")

    good = [r for r in rows if not r.get("error") and r.get("size") is not None and r.get("latency_us")]
    workloads = [w for w in PLOTTED if any(r["workload"] == w for r in good)]
    if not workloads:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.8 * len(workloads), 8.5), squeeze=False)
    handles: dict[str, Any] = {}
    for col, workload in enumerate(workloads):
        mine = [r for r in good if r["workload"] == workload]
        for row_i, (metric, ylabel) in enumerate((("latency_us", "latency per call (µs, synchronised)"),
                                                  ("gpu_us", "back-to-back GPU time per call (µs)"))):
            ax = axes[row_i][col]
            for label in ordered(r["competitor"] for r in mine):
                points = sorted((r["size"], r[metric]) for r in mine if r["competitor"] == label and r.get(metric))
                if points:
                    (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
                    handles.setdefault(label, line)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel(mine[0].get("axis", "size"))
            ax.set_ylabel(ylabel)
            if row_i == 0:
                ax.set_title(workload)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(4, len(handles)))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path = directory / PLOT_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
