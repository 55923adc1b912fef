"""Issue 30's host-time target, measured: "a one-kernel jit call is at most bare ``graph.launch()`` + 3 µs,
for any order over up to 8 distinct input buffers, in copy and view mode; the same with constants, two
outputs, or a 4 MiB output". Part of ``tools/bench_zero_copy.py`` (so of its A/B, ``tools/ab_hot_path.sh``).

Two groups of rows, host µs per call, each competitor alone in its blocks of consecutive calls, the
order rotated from round to round (``tools/bench_blocks.py``), the caller dropping every result:

* one kernel at batch 1 ([1, 256] float32): the bare floor, then ``jit`` (default config: zero-copy
  binding) on 8 input buffers taken in turn and in a random order drawn once ahead (a list of indices,
  so the loop costs every row the same), in output copy mode and in view mode; the same in random order
  with a constant argument (``constant_argnums``) and with two outputs (one ElementwiseKernel); and the
  bare launch driven by the same random-order loop, which shows what the loop itself costs.
* one kernel on a 4 MiB array ([1, 1048576] float32): its own bare floor (a graph of that size) and
  ``jit`` on 8 such buffers, copy and view mode; GPU time per call too, since at this size the GPU
  may be what bounds a block of calls (then host time ≈ GPU time for floor and rows alike).

Host time is measured in short blocks (``HOST_BLOCK`` calls, synchronised between blocks, many rounds):
at 4 MiB the GPU takes 7-9 µs a call against the host's 2-4 µs, so a long block fills CUDA's launch
queue and then reads the GPU's pace, not the host's (the 12:07 and 12:10 UTC runs of 2026-11-27 read
the bare launch itself at 3.2-3.3 µs that way, against 1.8 µs in other rounds of the same code).

``above_floor`` adds to every result of the benchmark each row minus its floor (the floors
``tools/ab_hot_path.sh`` also subtracts); ``check_list`` gives the target's pass/fail per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.bench_blocks import gpu_block, host_block, in_order, rotated

TARGET_US = 3.0
"""Issue 30: host time per call at most this far above the bare ``graph.launch()`` of the same graph."""
FLOOR = "bare graph.launch()"
FLOORS = (FLOOR, "bare graph, no copies", "bare pieces, no copies (launch, matmul out=, launch)")
"""The floor of each result of ``tools/bench_zero_copy.py`` (one per result), in the order looked for."""
BUFFERS = 8
TARGETED = "jit "
"""Rows the target applies to: ``jit`` calls (the floor and the loop's own cost are references)."""
LOOP_COST = "bare graph.launch() in the random-order loop (the loop's own cost)"
HOST_BLOCK = 64
"""Calls per host-time block: few enough that the launch queue never fills behind a slower GPU."""


def _orders(rng: np.random.Generator) -> tuple[list[int], list[int]]:
    return list(range(BUFFERS)), [int(k) for k in rng.integers(BUFFERS, size=4096)]


def _checked(graphed: Any, fn: Any, inputs: list, *rest: Any) -> Any:
    """``graphed``, after every input gave eager CuPy's result bit for bit (each output compared before
    the next call: a view is valid until then)."""
    import cupy

    for x in inputs * 2:  # the second round replays what the first captured and bound
        got, want = graphed(x, *rest), fn(x, *rest)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            if not np.array_equal(cupy.asnumpy(g), cupy.asnumpy(w)):
                raise ValueError(f"{getattr(fn, '__name__', fn)}: jit differs from eager CuPy")
    return graphed


def _host_rounds(reps: int) -> int:
    """Rounds of ``HOST_BLOCK`` calls that give each competitor about ``reps`` timed calls (at least 31 rounds)."""
    return max(31, reps // HOST_BLOCK)


def one_kernel_rows(reps: int) -> dict:
    """Issue 30's one-kernel rows at [1, 256]: 8 inputs in turn and at random, copy and view mode, a
    constant, two outputs."""
    import cupy

    import cupygraph as cg
    from tools.bench_cupy import BareGraph

    def double(x):
        return x * np.float32(2.0)

    def scaled(x, w):
        return x * w

    both = cupy.ElementwiseKernel("float32 x", "float32 y, float32 z", "y = x * 2.0f; z = x + 1.0f", "two_outputs")

    def two_outputs(x):
        return both(x)

    rng = np.random.default_rng(30)
    xs = [cupy.asarray(rng.standard_normal((1, 256)).astype(np.float32)) for _ in range(BUFFERS)]
    w = cupy.asarray(rng.standard_normal(256).astype(np.float32))
    turn, shuffled = _orders(rng)
    bare = BareGraph(double, xs[0])

    def jit(fn, mode, *rest, **options):
        graphed = cg.jit(fn, config=dict(capture_sizes=[1], output_mode=mode), **options)
        return _checked(graphed, fn, xs, *rest)

    launch = bare.graph.launch
    calls = {FLOOR: launch, LOOP_COST: in_order(lambda x: launch(), xs, shuffled)}
    for mode in ("copy", "view"):
        plain = jit(double, mode)
        calls[f"jit {mode} mode, 8 inputs in turn"] = in_order(plain, xs, turn)
        calls[f"jit {mode} mode, 8 inputs in random order"] = in_order(plain, xs, shuffled)
    for mode in ("copy", "view"):
        calls[f"jit {mode} mode, a constant argument, 8 inputs in random order"] = in_order(
            jit(scaled, mode, w, constant_argnums=(1,)), xs, shuffled, w)
    for mode in ("copy", "view"):
        calls[f"jit {mode} mode, two outputs, 8 inputs in random order"] = in_order(
            jit(two_outputs, mode), xs, shuffled)
    return {"workload": "one kernel [1, 256], 8 input buffers (issue 30 target)",
            "host_us": rotated(host_block, calls, HOST_BLOCK, rounds=_host_rounds(reps))}


def large_output_rows(reps: int) -> dict:
    """Issue 30's 4 MiB rows: one kernel on [1, 1048576], against a bare graph of that size."""
    import cupy

    import cupygraph as cg
    from tools.bench_cupy import BareGraph

    def double(x):
        return x * np.float32(2.0)

    rng = np.random.default_rng(31)
    xs = [cupy.asarray(rng.standard_normal((1, 1 << 20)).astype(np.float32)) for _ in range(BUFFERS)]
    turn, shuffled = _orders(rng)
    bare = BareGraph(double, xs[0])
    calls = {FLOOR: bare.graph.launch}
    for mode in ("copy", "view"):
        graphed = _checked(cg.jit(double, config=dict(capture_sizes=[1], output_mode=mode)), double, xs)
        calls[f"jit {mode} mode, 8 inputs in turn"] = in_order(graphed, xs, turn)
        calls[f"jit {mode} mode, 8 inputs in random order"] = in_order(graphed, xs, shuffled)
    return {"workload": "one kernel [1, 1048576], a 4 MiB output, 8 input buffers (issue 30 target)",
            "host_us": rotated(host_block, calls, HOST_BLOCK, rounds=_host_rounds(reps)),
            "gpu_us": rotated(gpu_block, calls, reps, rounds=5)}


def target_results(reps: int) -> list[dict]:
    """Both groups (each an error row instead where it fails: an older tree may lack what a row uses);
    the one-kernel rows with ``5 * reps`` timed calls per competitor, the 4 MiB ones with ``reps``."""
    out = []
    for rows, calls in ((one_kernel_rows, 5 * reps), (large_output_rows, reps)):
        try:
            out.append(rows(calls))
        except Exception as err:
            out.append({"workload": rows.__doc__.split(":")[0], "error": f"{type(err).__name__}: {err}",
                        "issue_30_target": True})
        else:
            out[-1]["issue_30_target"] = True
    return out


def above_floor(result: dict) -> None:
    """Add ``above_floor_us`` (each figure minus its result's floor, per kind) and, on issue 30's rows,
    ``targets`` (each ``jit`` row's host time above the floor against ``TARGET_US``)."""
    found: dict[str, dict[str, float]] = {}
    for kind in ("host_us", "latency_us", "gpu_us"):
        figures = result.get(kind, {})
        floor = next((figures[f] for f in FLOORS if f in figures), None)
        if floor is not None:
            found[kind] = {label: round(value - floor, 3) for label, value in figures.items()}
    if found:
        result["above_floor_us"] = found
    if result.get("issue_30_target") and "host_us" in found:
        result["targets"] = [dict(row=label, above_floor_us=value, limit_us=TARGET_US, met=value <= TARGET_US)
                             for label, value in found["host_us"].items() if label.startswith(TARGETED)]


def check_list(payload: dict) -> list[str]:
    """Issue 30's host-time target, one line per row: PASS or FAIL, the figure above the floor, the row."""
    lines = [f"Issue 30 host-time target: a one-kernel jit call costs at most bare graph.launch() + {TARGET_US:.2f} "
             f"us of host time ({payload.get('device', '?')}, {payload.get('date', '?')})"]
    met = total = 0
    for result in payload.get("results", []):
        if not result.get("issue_30_target"):
            continue
        if "error" in result:
            lines.append(f"  NOT MEASURED  {result['workload']}: {result['error']}")
            continue
        gpu = result.get("gpu_us", {})
        for target in result.get("targets", []):
            total += 1
            met += target["met"]
            on_gpu = gpu.get(target["row"])
            bound = (f" (GPU {on_gpu:.2f} us per call, floor {gpu[FLOOR]:.2f})"
                     if on_gpu is not None and FLOOR in gpu else "")
            lines.append(f"  {'PASS' if target['met'] else 'FAIL'}  {target['above_floor_us']:+6.2f} us  "
                         f"{result['workload']}: {target['row']}{bound}")
        loop = result.get("above_floor_us", {}).get("host_us", {}).get(LOOP_COST)
        if loop is not None:
            lines.append(f"  (the random-order loop alone costs {loop:+.2f} us of each row above)")
    lines.append(f"  {met} of {total} rows meet the target")
    return lines
