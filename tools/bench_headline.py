"""The headline and the targets of the results page, computed from one run's rows.

Every sentence names the winner of one metric for one workload; every target says ``met`` or
``missed`` by a strict comparison of the measured figures with the limit (1.152 against a limit of
1.15 is missed). Works on plain rows (dicts); no GPU needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

OURS = "jit-copy"  # cupygraph's default output mode: what the headline compares
METRICS = (  # (row field, what the sentence calls it)
    ("latency_us", "Latency (one call + sync, device idle before)"),
    ("gpu_us", "GPU time per call (back-to-back calls, CUDA events)"),
    ("host_issue_us", "Host time to issue a call (back-to-back calls)"),
)
UPPER_BOUND_KEYS = {"jax"}  # GPU time measured by host clock to ready: an upper bound


def _good(rows: Iterable[dict], metric: str) -> list[dict]:
    return [r for r in rows if not r.get("error") and isinstance(r.get(metric), (int, float))]


def _size_label(row: dict) -> str:
    return f"{row.get('axis', 'size')}={row['size']}" if row.get("size") is not None else "the serving mix"


def _span(values: list[float], fmt: str = ".1f", unit: str = " µs") -> str:
    lo, hi = min(values), max(values)
    if unit == "×" and fmt == ".2f" and format(lo, fmt) == "1.00":  # "1.00× lower" would hide the sign of a win
        fmt = ".3f"
    text = format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"
    return text + unit


def by_size(rows: list[dict]) -> dict[Any, list[dict]]:
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(r.get("size"), []).append(r)
    return out


def winners(rows: list[dict], metric: str) -> list[tuple[Any, dict]]:
    """(size, row with the lowest ``metric``) per size, in the order sizes appear."""
    out = []
    for size, group in by_size(_good(rows, metric)).items():
        out.append((size, min(group, key=lambda r: r[metric])))
    return out


def metric_sentence(rows: list[dict], metric: str, title: str) -> Optional[str]:
    """One sentence: who is lowest on ``metric`` at each size, and where cupygraph (copy) stands."""
    wins = winners(rows, metric)
    if not wins:
        return None
    bound = " (JAX's figure is an upper bound)" if metric == "gpu_us" and any(
        r["key"] in UPPER_BOUND_KEYS for r in _good(rows, metric)) else ""
    labels = [w["competitor"] for _, w in wins]
    if len(set(labels)) == 1:
        every = "at every size" if len(wins) > 1 else f"at {_size_label(wins[0][1])}"
        lead = f"{labels[0]} is lowest {every} ({_span([w[metric] for _, w in wins])})"
    else:
        lead = "lowest: " + ", ".join(f"{w['competitor']} at {_size_label(w)} ({w[metric]:.1f} µs)" for _, w in wins)
    ours = {r.get("size"): r for r in _good(rows, metric) if r["key"] == OURS}
    tail = ""
    if ours and any(w["key"] != OURS for _, w in wins):
        ratios = [ours[s][metric] / w[metric] for s, w in wins if s in ours and w[metric] > 0]
        tail = (f"; cupygraph jit (copy) takes {_span([r[metric] for r in ours.values()])}"
                + (f", {_span(ratios, '.2f', '×')} the lowest" if ratios else ""))
    elif ours:
        runners = []
        for size, group in by_size(_good(rows, metric)).items():
            others = sorted((r for r in group if r["key"] != OURS), key=lambda r: r[metric])
            if others and size in ours:
                runners.append((others[0], others[0][metric] / ours[size][metric]))
        if runners:
            names = sorted({r["competitor"] for r, _ in runners})
            tail = f"; next: {', '.join(names)} at {_span([x for _, x in runners], '.2f', '×')} its figure"
    return f"**{title}**: {lead}{tail}{bound}."


SAME_KERNELS = ("bare", "jit-view", "jit-copy", "torch-graph-same")  # one set of RawKernels, several graph managers
FUSION_ROUTE = ("jit-copy", "jit-fused", "torch-compile", "jax")


def _compare(rows: list[dict], keys: tuple[str, ...], title: str) -> Optional[str]:
    """Latency and GPU time of ``keys`` side by side (spans over sizes), the latency winner named."""
    mine = [r for r in _good(rows, "latency_us") if r["key"] in keys]
    present = [k for k in keys if any(r["key"] == k for r in mine)]
    if len(present) < 2 or present[0] != keys[0]:  # nothing to compare against the first key's row
        return None
    parts = []
    for key in present:
        theirs = [r for r in mine if r["key"] == key]
        gpu = [r["gpu_us"] for r in theirs if isinstance(r.get("gpu_us"), (int, float))]
        parts.append(f"{theirs[0]['competitor']} {_span([r['latency_us'] for r in theirs])}"
                     + (f" (GPU {_span(gpu)})" if gpu else ""))
    wins = winners(mine, "latency_us")
    names = list(dict.fromkeys(w["competitor"] for _, w in wins))
    lead = f"{names[0]} has the lowest latency" + (" at every size" if len(wins) > 1 else "") if len(names) == 1 \
        else "the lowest latency: " + ", ".join(f"{w['competitor']} at {_size_label(w)}" for _, w in wins)
    return f"**{title}**: {lead}; latency " + ", ".join(parts) + "."


def headline(rows: list[dict]) -> dict[str, list[str]]:
    """Sentences by workload: one per metric, then the same-kernel and fusion-route comparisons."""
    out: dict[str, list[str]] = {}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        sentences = [s for metric, title in METRICS if (s := metric_sentence(mine, metric, title))]
        same = _compare(mine, SAME_KERNELS, "Same RawKernels, different graph managers")
        fused = _compare(mine, FUSION_ROUTE, "The fusion route") if any(
            r["key"] == "jit-fused" for r in mine) else None
        sentences += [s for s in (same, fused) if s]
        if sentences:
            out[workload] = sentences
    return out


def peer_wins(rows: list[dict], peers: Iterable[str] = ("torch-compile", "jax", "torch-graph")) -> list[str]:
    """Plain statements of where a peer a user would pick beats cupygraph (copy), with the factor."""
    out = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload and not r.get("error")]
        ours = {r.get("size"): r for r in mine if r["key"] == OURS}
        for peer in peers:
            theirs = [r for r in mine if r["key"] == peer and r.get("size") in ours]
            parts = []
            for metric, word in (("latency_us", "latency"), ("gpu_us", "GPU time per call")):
                won = [r for r in theirs if r.get(metric) and ours[r.get("size")].get(metric)
                       and r[metric] < ours[r.get("size")][metric]]
                if won:
                    factors = [ours[r.get("size")][metric] / r[metric] for r in won]
                    where = ", ".join(_size_label(r) for r in won)
                    parts.append(f"{word} at {where} ({_span(factors, '.2f', '×')} lower)")
            if parts:
                out.append(f"{workload}: {theirs[0]['competitor']} beats cupygraph jit (copy) on "
                           + "; on ".join(parts) + ".")
    return out


# -- targets ------------------------------------------------------------------------------------------


@dataclass
class Target:
    issue: str
    text: str
    measured: str
    met: bool

    @property
    def status(self) -> str:
        """met, missed, or not measured (a run that did not time it decides nothing)."""
        if self.measured.startswith("not measured"):
            return "not measured"
        return "met" if self.met else "missed"


def _pairs(rows: list[dict], workloads: Iterable[str], key: str, other: str, metric: str = "latency_us",
           size_ok: Callable[[Any], bool] = lambda s: True) -> list[tuple[dict, dict]]:
    out = []
    for workload in workloads:
        mine = [r for r in _good(rows, metric) if r["workload"] == workload and size_ok(r.get("size"))]
        ref = {r.get("size"): r for r in mine if r["key"] == other}
        out += [(r, ref[r.get("size")]) for r in mine if r["key"] == key and r.get("size") in ref]
    return out


def _ratio_target(issue: str, text: str, pairs: list[tuple[dict, dict]], ok: Callable[[float], bool],
                  invert: bool = False, metric: str = "latency_us") -> Target:
    """``pairs`` of (ours, reference); the ratio of their ``metric`` is ours/reference (or reference/ours
    with invert)."""
    if not pairs:
        return Target(issue, text, "not measured in this run", False)
    parts, met = [], True
    for workload in dict.fromkeys(a["workload"] for a, _ in pairs):
        ratios = [(b[metric] / a[metric]) if invert else (a[metric] / b[metric])
                  for a, b in pairs if a["workload"] == workload]
        met = met and all(ok(x) for x in ratios)
        parts.append(f"{workload} {_span(ratios, '.3f', '×')}")
    return Target(issue, text, ", ".join(parts), met)


ISSUE31_WIDTH = 1024
"""The width of issue 31's mlp (``tools/bench_workloads.MLP_WIDTH`` since that issue)."""

RAW_CHAIN = ("chain-rawmodule",)
"""Issue 30's PDL chain: the chain's kernels from plain ``cupy.RawModule``, each waiting."""


def _unmeasured(rows: list[dict], workloads: tuple[str, ...], keys: tuple[str, ...]) -> str:
    """Why a target over ``workloads`` between the rows ``keys`` has no figure: not run, or the rows'
    errors (a framework missing, a competitor that failed its check)."""
    ran = [r for r in rows if r["workload"] in workloads]
    if not ran:
        return "not measured in this run"
    why = [f"{r['competitor']} failed: {r['error'][:160]}" for r in ran if r["key"] in keys and r.get("error")]
    why += [f"no {key} row (left out or not applicable)" for key in keys if not any(r["key"] == key for r in ran)]
    return "not measured: " + "; ".join(dict.fromkeys(why)) if why else "not measured in this run"


def _issue30_targets(rows: list[dict]) -> list[Target]:
    """Issue 30's chain targets, at the issue's size (1,024 floats): jit (default config) against eager CuPy,
    its GPU time against ``pdl="off"`` (the view rows: the same output mode on both sides), and the
    latency of the chain of PDL-opted kernels (cupygraph's own, and plain RawModule ones) against jax.jit.
    A target the run could not measure says why (a missing framework, a failed row)."""
    issue_size: Callable[[Any], bool] = lambda size: size == 1024
    both = ("chain", *RAW_CHAIN)
    made = [
        (_ratio_target("#30", "jit ≥ 6× faster than eager CuPy on the chain of plain cupy.RawModule kernels that "
                       "wait (n=1024); eager ÷ jit (copy)", _pairs(rows, RAW_CHAIN, OURS, "cupy", size_ok=issue_size),
                       lambda x: x >= 6.0, invert=True), RAW_CHAIN, (OURS, "cupy")),
        (_ratio_target("#30", "its GPU time ≤ 0.7× of pdl=\"off\" (n=1024); jit (view) ÷ jit (view), pdl off",
                       _pairs(rows, RAW_CHAIN, "jit-view", "jit-plain", metric="gpu_us", size_ok=issue_size),
                       lambda x: x <= 0.7, metric="gpu_us"), RAW_CHAIN, ("jit-view", "jit-plain")),
        (_ratio_target("#30", "the chain of PDL-opted kernels: jit latency ≤ jax.jit's (n=1024); jit (copy) ÷ jax",
                       _pairs(rows, both, OURS, "jax", size_ok=issue_size), lambda x: x <= 1.0), both, (OURS, "jax")),
    ]
    for target, workloads, keys in made:
        if target.measured == "not measured in this run":
            target.measured = _unmeasured(rows, workloads, keys)
    return [target for target, _, _ in made]


def targets(rows: list[dict], capture: Optional[dict] = None, control_flow: Optional[dict] = None) -> list[Target]:
    """Every target the issues set, evaluated strictly on this run's medians (latency, unless the target
    says GPU time)."""
    out = [
        _ratio_target("#3, #5", f"cupygraph ({mode}) latency ≤ 1.15× the bare CuPy graph (chain, stencil, mlp)",
                      _pairs(rows, ("chain", "stencil", "mlp"), key, "bare"), lambda x: x <= 1.15)
        for mode, key in (("copy", "jit-copy"), ("view", "jit-view"))
    ]
    out.append(_ratio_target("#3", "cupygraph (copy) ≥ 6× faster than eager CuPy (chain); eager ÷ cupygraph",
                             _pairs(rows, ("chain",), OURS, "cupy"), lambda x: x >= 6.0, invert=True))
    for peer, name in (("torch-compile", "torch.compile (reduce-overhead)"),
                       ("torch-graph", "torch.cuda.CUDAGraph on torch ops")):
        out.append(_ratio_target("#5", f"cupygraph (copy) faster than {name} (chain, stencil); theirs ÷ ours",
                                 _pairs(rows, ("chain", "stencil"), OURS, peer), lambda x: x > 1.0, invert=True))
    out.append(_ratio_target("#5", "cupygraph (copy) faster than jax.jit (stencil, mlp at batch ≤ 64); theirs ÷ ours",
                             _pairs(rows, ("stencil", "mlp"), OURS, "jax", size_ok=lambda s: s is not None and s <= 64),
                             lambda x: x > 1.0, invert=True))
    # Issue 31's mlp is 1024 wide; the runs before it timed an mlp of 256-wide hand-written layers, whose rows
    # must not stand for it.
    issue31 = [r for r in rows if r["workload"] != "mlp" or (r.get("shape") or [0])[-1] == ISSUE31_WIDTH]
    for metric, word in (("latency_us", "latency"), ("gpu_us", "GPU time")):
        out.append(_ratio_target(
            "#31", f"mlp (4 × 1024, bias + ReLU): cupygraph (copy) {word} ≤ 1.0× torch.cuda.CUDAGraph of addmm + relu "
            "(every batch)", _pairs(issue31, ("mlp",), OURS, "torch-graph", metric), lambda x: x <= 1.0,
            metric=metric))
    out.append(_ratio_target("#4", "PIECEWISE ≥ 3× faster than eager CuPy; eager ÷ cupygraph (copy)",
                             _pairs(rows, ("piecewise",), OURS, "cupy"), lambda x: x >= 3.0, invert=True))
    out.append(_ratio_target("#4", "PIECEWISE (copy) within 1.2× of two bare graphs + one eager matmul",
                             _pairs(rows, ("piecewise",), OURS, "bare"), lambda x: x <= 1.2))
    out += _issue30_targets(rows)
    out += _capture_targets(capture)
    out += _control_flow_targets(control_flow)
    return out


def measured_targets(rows: list[dict], capture: Optional[dict] = None) -> str:
    """The targets this run measured, one line each, met or missed with the figures, and those it meant
    to measure but could not, with the reason (the results page lists every target)."""
    measured = [t for t in targets(rows, capture) if t.measured != "not measured in this run"]
    return "\n".join(["## Targets measured in this run (or meant to be, and why not)", *(
        f"- {t.status.upper()}: {t.text} (issue {t.issue}): {t.measured}" for t in measured)]) if measured else ""


def _capture_targets(cap: Optional[dict]) -> list[Target]:
    time_text, memory_text = "capture all 51 stencil sizes < 1 s", "their pool ≤ 1.25× the largest size alone"
    if not cap or cap.get("error"):
        why = f"not measured: {cap['error']}" if cap else "not measured in this run"
        return [Target("#5", time_text, why, False), Target("#5", memory_text, why, False)]
    return [Target("#5", time_text, f"{cap['capture_all_s']:.3f} s", cap["capture_all_s"] < 1.0),
            Target("#5", memory_text, f"{cap['memory_ratio']:.3f}×", cap["memory_ratio"] <= 1.25)]


def _control_flow_targets(cf: Optional[dict]) -> list[Target]:
    body_text = "device while ≥ 2× faster than graphed body + host check (64², 128²)"
    jax_text = "device while faster than jax.lax.while_loop (every grid)"
    rows = (cf or {}).get("results") or []
    if not rows:
        return [Target("#6", body_text, "not measured in this run", False),
                Target("#6", jax_text, "not measured in this run", False)]
    small = [r for r in rows if r["n"] in (64, 128)]
    body = [r["graph_body"]["median_ms"] / r["graph_while"]["median_ms"] for r in small]
    out = [Target("#6", body_text, ", ".join(f"{x:.2f}×" for x in body) or "64²/128² not run",
                  bool(body) and len(small) == 2 and all(x >= 2.0 for x in body))]
    with_jax = [r for r in rows if "jax" in r]
    vs_jax = [r["jax"]["median_ms"] / r["graph_while"]["median_ms"] for r in with_jax]
    out.append(Target("#6", jax_text, ", ".join(f"{x:.2f}× ({r['n']}²)" for x, r in zip(vs_jax, with_jax))
                      or "jax not run", bool(vs_jax) and len(with_jax) == len(rows) and all(x > 1.0 for x in vs_jax)))
    return out
