#!/usr/bin/env python3
"""Where a zero-copy ``jit`` call's host time goes, rung by rung (issue 14's one-kernel target).

Each rung adds one layer of the fast path to the one before, timed alone in its own block:
the bare ``graph.launch()``, the recording's launch, the entry's launch, the binder's work, the
entry's ``run`` and the whole call. Differences between rungs are what each layer costs.
Usage on the GPU machine: ``python3 tools/probe_hot_path_ladder.py [--reps 20000]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20000)
    args = parser.parse_args()

    import cupy

    import cupygraph as cg
    from tools.bench_cupy import BareGraph
    from tools.bench_zero_copy import host_block, rotated

    cupy.cuda.Device(0).use()

    def f(x):
        return x * np.float32(2.0)

    x = cupy.asarray(np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32))
    bare = BareGraph(f, x)
    g = cg.jit(f, config=dict(capture_sizes=[1]))
    assert np.array_equal(cupy.asnumpy(g(x)), cupy.asnumpy(f(x)))
    plan = g._plans.find((x,))
    entry = plan.entry
    binder = entry.binding
    stream = cupy.cuda.get_current_stream()

    def binder_work():
        binder.bind((x,), (), entry._copy_rows, stream)

    import ctypes

    from cupygraph.backends import cupy_fast
    from cupygraph.backends.cupy_fast import references
    from cupygraph.cache.entry import use_tick

    g(x)  # the second call asks for the compiled replay
    made = g._plans._replayer
    print(f"compiled: {cupy_fast.COMPILED}; replayer {made}; cuGraphLaunch at {cupy_fast.graph_launch_address():#x}")
    lock = g._family_lock
    replay = python_launch = lambda args: None
    g_python = g
    if made is not None:
        replay = made.replay
        g_python = g._call  # the whole call, without the compiled base's offer
        # The same replay, launching through recording.launch() instead of cuGraphLaunch.
        python_launch = cupy_fast.Replayer(
            array_type=cupy.ndarray, shapes=(x.shape,), dtypes=(x.dtype,), plan=plan, entry=entry,
            token=entry.constants_token, run=entry.run, binder=binder, slot=binder._outputs[0],
            recording=binder.recording, backend=entry.backend, lock=lock,
            current_stream=cupy.cuda.get_current_stream, use_tick=use_tick).replay
    ring_item = binder._outputs[0].ring[0]

    libcuda = ctypes.PyDLL("libcuda.so.1")
    launch = libcuda.cuGraphLaunch
    launch.argtypes, launch.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    handle, stream_ptr = ctypes.c_void_p(int(bare.graph.graphExec)), ctypes.c_void_p(stream.ptr)
    runtime_launch = cupy.cuda.runtime.graphLaunch
    rungs = {
        "bare graph.launch()": bare.graph.launch,
        "runtime.graphLaunch(exec, stream)": lambda: runtime_launch(bare.graph.graphExec, stream.ptr),
        "ctypes cuGraphLaunch (GIL held)": lambda: launch(handle, stream_ptr),
        "cupy.cuda.get_current_stream()": cupy.cuda.get_current_stream,
        "recording.launch()": entry.recording.launch,
        "entry.launch()": entry.launch,
        "order_after_last_use()": entry.backend.order_after_last_use,
        "binder.bind(...)": binder_work,
        "binder work + entry.launch()": lambda: (binder_work(), entry.launch()),
        "entry.run(...)": lambda: entry.run((x,), 1, ()),
        "plans.find((x,))": lambda: g._plans.find((x,)),
        "compiled replay((x,))": lambda: replay((x,)),
        "compiled replay, launch via Python": lambda: python_launch((x,)),
        "x.shape": lambda: x.shape,
        "x.data.ptr": lambda: x.data.ptr,
        "lock acquire + release": lambda: (lock.acquire(), lock.release()),
        "cupy_fast.references(ring item)": lambda: references(ring_item),
        "jit call g(x)": lambda: g(x),
        "jit call, Python path g._call(x)": lambda: g_python(x),
        "eager f(x)": lambda: f(x),
    }
    if made is None:  # no compiled replay here: its rungs would time a no-op under its name
        for label in [name for name in rungs if name.startswith("compiled replay") or "g._call" in name]:
            del rungs[label]
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; host us per call, medians of 7 blocks "
          f"of {args.reps}; binder executables {binder.banks}, node updates {binder.node_updates}")
    for label, figure in rotated(host_block, rungs, args.reps).items():
        print(f"{label:<34} {figure:7.3f}")
    print(f"node updates after the ladder: {binder.node_updates}")
    made = g._plans._replayer
    if made is not None:
        print(f"compiled replay served {made.served}, handed back {made.passed}")


if __name__ == "__main__":
    main()
