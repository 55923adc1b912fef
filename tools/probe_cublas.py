#!/usr/bin/env python3
"""Compare the two cuBLAS bindings of cupygraph.linalg on the GPU machine (issue 13's binding choice).

For each binding (nvmath-python's ``nvmath.bindings.cublas``, and ctypes on CuPy's libcublas):
the import cost in a fresh interpreter (after CuPy), whether a GEMM captures into a graph with a
CuPy kernel, whether replays on fresh data equal eager calls bit for bit, the host cost of an eager
call, and the GPU time of the GEMM in a graph and eagerly. Each binding runs in its own thread, so
that thread's handle comes from it. Prints a table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IMPORTS = {
    "nvmath": "import nvmath.bindings.cublas",
    "ctypes": "from cupygraph.linalg._binding import CtypesCublas; CtypesCublas()",
}


def import_seconds(name: str, repeats: int = 3) -> Any:
    code = ("import cupy, cupygraph, time; t = time.perf_counter(); " + IMPORTS[name] +
            "; print(time.perf_counter() - t)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    times = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        if done.returncode:
            return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def probe(name: str) -> dict:
    import cupy
    import numpy as np

    import cupygraph as cg

    os.environ["CUPYGRAPH_CUBLAS_BINDING"] = name
    result: dict[str, Any] = {"binding": name}
    rng = np.random.default_rng(0)
    a = cupy.asarray(rng.standard_normal((64, 1024)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((1024, 1024)).astype(np.float32))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        result["info"] = cg.linalg.binding_info()
        cg.linalg.prepare()
        out = cupy.empty((64, 1024), np.float32)
        cg.matmul(a, b, out=out)
        del_me = out + 1  # leaves a free block of this size in the pool for the captured kernel's output
        del del_me
        stream.begin_capture()
        cg.matmul(a, b, out=out)
        shifted = out + 1  # a CuPy kernel after the GEMM in the same graph
        graph = stream.end_capture()
        same, close = [], []
        for _ in range(3):
            a[...] = cupy.asarray(rng.standard_normal((64, 1024)).astype(np.float32))
            b[...] = cupy.asarray(rng.standard_normal((1024, 1024)).astype(np.float32))
            graph.launch(stream)
            stream.synchronize()
            replayed, plus = cupy.asnumpy(out), cupy.asnumpy(shifted)
            eager = cupy.asnumpy(cg.matmul(a, b))
            same.append(bool(np.array_equal(replayed, eager) and np.array_equal(plus, eager + 1)))
            close.append(bool(np.allclose(replayed, cupy.asnumpy(cupy.matmul(a, b)), rtol=1e-4, atol=1e-3)))
        result["captured_replays_equal_eager"] = same
        result["close_to_cupy_matmul"] = close
        # GPU time per GEMM: 200 replays of the graph vs 200 eager calls, events around each block.
        for label, run in (("graph_us", lambda: graph.launch(stream)), ("eager_us", lambda: cg.matmul(a, b, out=out))):
            for _ in range(20):
                run()
            begin, end = cupy.cuda.Event(), cupy.cuda.Event()
            begin.record(stream)
            for _ in range(200):
                run()
            end.record(stream)
            end.synchronize()
            result[label] = cupy.cuda.get_elapsed_time(begin, end) * 1e3 / 200
        # Host cost of an eager call on a tiny product (the binding's overhead shows), vs cupy.matmul.
        x = cupy.asarray(rng.standard_normal((64, 64)).astype(np.float32))
        o = cupy.empty((64, 64), np.float32)
        for label, run in (("eager_host_us", lambda: cg.matmul(x, x, out=o)),
                           ("cupy_matmul_host_us", lambda: cupy.matmul(x, x, out=o))):
            for _ in range(100):
                run()
            stream.synchronize()
            t = time.perf_counter()
            for _ in range(2000):
                run()
            result[label] = (time.perf_counter() - t) * 1e6 / 2000
            stream.synchronize()
        # Where an eager call's host time goes (Python or the cuBLAS call).
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(500):
            cg.matmul(x, x, out=o)
        profiler.disable()
        stream.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        result["profile"] = text.getvalue().splitlines()[-20:]
    return result


def in_thread(name: str) -> dict:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = probe(name)
        except Exception as err:
            box["value"] = {"binding": name, "error": f"{type(err).__name__}: {err}"}

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return box["value"]


def mapped_cublas() -> list[str]:
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return sorted({line.split()[-1] for line in maps if "libcublas" in line and "/" in line})


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results = {"import_seconds": {name: import_seconds(name) for name in IMPORTS}}
    results["bindings"] = [in_thread(name) for name in ("nvmath", "ctypes")]
    results["libraries_mapped"] = mapped_cublas()
    print(json.dumps(results, indent=1, default=str))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
