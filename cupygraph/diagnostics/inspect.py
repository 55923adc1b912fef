"""Looking inside a jitted function: a table of its graphs, and its graphs as Graphviz pictures."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional, Protocol, Union

from ..backends.base import Backend
from ..cache import CUDAGraphRegistry, CUDAGraphStats, key_label
from ..config.defaults import graphs_disabled_by_env
from ..config.model import CUDAGraphConfig
from ..errors import CupyGraphError


class Inspectable(Protocol):
    """What diagnostics read of a jitted function (``GraphedFunction`` is one): its graphs are its registry's."""

    __name__: str
    config: CUDAGraphConfig
    backend: Backend
    registry: CUDAGraphRegistry

    def stats(self) -> CUDAGraphStats: ...


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def describe(graphed: Inspectable) -> str:
    """Graphs held per mode and size (bytes, what the capture took from the pool and for the executable,
    replays, capture time), hit rate and fallbacks by reason."""
    stats = graphed.stats()
    entries = sorted(graphed.registry.entries(), key=lambda e: (e.key.mode.name, e.key.descriptor.num_tokens))
    rows = [["mode", "size", "seq_len", "bytes", "pool taken", "executable", "replays", "avg replay (host)",
             "capture"]]
    sampled = graphed.config.replay_timing_every > 0
    timed = graphed.config.time_replays
    if sampled:  # replay_timing_every: the device time of the sampled replays, and the eager warm-up's
        rows[0][8:8] = ["replay (device)", "eager"]
    sources = set()
    for e in entries:
        d, cost = e.key.descriptor, e.cost
        if cost is not None:
            sources.add(cost.executable_source)
        rows.append([
            e.key.mode.name, str(d.num_tokens), "-" if d.seq_len is None else str(d.seq_len), f"{e.nbytes:,}",
            "-" if cost is None else f"{cost.pool_bytes:,}",
            "-" if cost is None or cost.executable_bytes is None else f"{cost.executable_bytes:,}",
            str(e.replay_count), _host_replay_time(e, timed), f"{e.capture_time * 1e3:.2f} ms",
        ])
        if sampled:
            replay = e.timing.replay_s() if e.timing is not None else None
            eager = e.timing.eager_s() if e.timing is not None else None
            rows[-1][8:8] = ["-" if replay is None else f"{replay * 1e6:.1f} us",
                             "-" if eager is None else f"{eager * 1e6:.1f} us"]
    pooled = graphed.backend.has_pool  # the host backend's static buffers are plain arrays, in no pool
    pool = f"pool={graphed.backend.pool_bytes():,} bytes" if pooled else "pool=none (no memory pool on this backend)"
    head = (
        f"{graphed.__name__}: backend={graphed.backend.name} mode={graphed.config.mode.name} "
        f"graphs={len(entries)} {pool}\n"
        f"calls={stats.calls} hits={stats.hits} misses={stats.misses} hit rate={stats.hit_rate():.1%} "
        f"captures={stats.captures} evictions={stats.evictions} fallbacks={stats.fallbacks}"
    )
    parts = [head, _table(rows) if entries else "(no graphs held)"]
    if sources:  # what the two measured columns are (cache.stats.GraphCost)
        taken = ("memory the family's pool took for the key at capture" if pooled
                 else "the bytes of the static buffers made for the key at capture (no pool)")
        parts.append(f"pool taken: {taken} (stats().graph_costs); executable: " + "; ".join(sorted(sources)))
    for title, counts in (("eager fallbacks by reason:", stats.fallbacks_by_reason),
                          ("evictions by reason:", stats.evictions_by_reason),
                          ("re-captures by reason:", stats.recaptures_by_reason)):
        if counts:  # each reason's code with the last detail seen for it
            parts.append(title)
            parts += [f"  {count:>6}  {code}: {stats.detail(code)}" for code, count in counts.most_common()]
    if stats.baked_uploads:  # host data frozen into graphs (host_uploads="constant"/"auto")
        parts.append("host uploads baked into graphs as constants:")
        parts += [f"  {nbytes:>6} bytes  {call}" for call, nbytes in sorted(stats.baked_uploads.items())]
    if stats.routed_calls:  # CuPy's library calls run through cupygraph's capture-safe ones (issue 29)
        parts.append("library calls routed to capture-safe implementations (graphs):")
        parts += [f"  {count:>6}  {call}" for call, count in stats.routed_calls.most_common()]
    parts += _conditional_nodes(graphed, entries)
    return "\n".join(parts)


def _host_replay_time(entry: Any, timed: bool) -> str:
    """The mean host time of the entry's replays: "-" where none was measured (``time_replays`` off, or no
    replay yet), never a 0.0 that reads as a measurement."""
    if not timed or entry.replay_count == 0:
        return "-"
    return f"{entry.avg_replay_time_ms * 1e3:.1f} us"


def _conditional_nodes(graphed: Inspectable, entries: list[Any]) -> list[str]:
    """Lines naming each graph's conditional nodes (while_loop, cond, switch), read from its real graph."""
    if graphed.backend.name != "cupy":
        return []
    from ..backends.driver.topology import recording_topology

    lines = []
    for entry in entries:
        try:
            found = recording_topology(entry.recording)["conditional"]
        except CupyGraphError:  # no cuda-bindings, or a graph that cannot be read: nothing to say
            continue
        if found:
            lines.append(f"  {key_label(entry.key)}: {'; '.join(found)}")
    return ["conditional nodes (while_loop, cond, switch) per graph:", *lines] if lines else []


class GraphNotHeldError(CupyGraphError, LookupError):
    """``to_dot`` was asked for a graph the function does not hold; the message lists what it holds."""


def to_dot(graphed: Inspectable, size: Optional[int] = None) -> str:
    """The captured graph for the batch ``size`` (padded; default: the largest held) as DOT text."""
    entries = graphed.registry.entries()
    name = graphed.__name__
    if not entries:
        if not graphed.config.mode.has_graphs():
            why = "CUPYGRAPH_DISABLE is set" if graphs_disabled_by_env() else "its config has mode NONE"
            raise GraphNotHeldError(f"{name} holds no graphs: it runs eagerly ({why})")
        raise GraphNotHeldError(f"{name} holds no graphs yet: call it (or warmup()) first")
    held = sorted({e.key.descriptor.num_tokens for e in entries})
    if size is None:
        entry = max(entries, key=lambda e: e.key.descriptor.num_tokens)
    else:
        padded = graphed.config.get_padded_batch_size(size)
        if padded is None:
            raise GraphNotHeldError(
                f"batch {size} is above the largest capture size {graphed.config.largest_capture_size}: it runs "
                f"eagerly, without a graph; held sizes: {held}")
        matching = [e for e in entries if e.key.descriptor.num_tokens == padded]
        if not matching:
            raise GraphNotHeldError(f"no graph held for batch {size} (padded to {padded}); held sizes: {held}")
        entry = matching[0]
    return entry.recording.to_dot()


DOT_SUFFIXES = (".dot", ".gv", ".svg", ".png", ".pdf")
"""What ``render_dot`` writes: DOT text (.dot, .gv) or a picture Graphviz renders (.svg, .png, .pdf)."""


def render_dot(dot: str, out: Union[str, Path]) -> Path:
    """Write ``dot`` to ``out``: ``.dot``/``.gv`` as text, ``.svg``/``.png``/``.pdf`` through Graphviz."""
    out = Path(out)
    fmt = out.suffix.lower().lstrip(".")
    if out.suffix.lower() not in DOT_SUFFIXES:
        # Checked before Graphviz is looked for: a typo must not read as a missing install.
        raise ValueError(f"{out}: unknown extension {out.suffix or '(none)'!r}; use one of {', '.join(DOT_SUFFIXES)}")
    if fmt in ("dot", "gv"):
        out.write_text(dot, encoding="utf-8")
        return out
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(
            f"Graphviz is not installed (no 'dot' on PATH), so {out.name} cannot be rendered; "
            f"install graphviz or write a .dot file instead"
        )
    result = subprocess.run([exe, f"-T{fmt}", "-o", str(out)], input=dot.encode(), capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"Graphviz failed to render {out.name}: {result.stderr.decode(errors='replace').strip()}")
    return out
