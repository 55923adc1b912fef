#!/usr/bin/env python3
"""Which cuSOLVER eigen/SVD routines (and which cuSPARSE dense @ CSR forms) capture into a CUDA graph.

    python3 tools/probe_cusolver_capture.py --out probe.json

Every candidate runs in its own process on a fresh cuSOLVER handle and a fresh non-blocking
stream (a failed capture or a sticky CUDA error cannot poison the next candidate), through
nvmath-python's bindings: one eager call (checked against NumPy), ten more on the same input (are
they bit-identical?), five on new inputs (checked), then the same call under stream capture
(CuPy's relaxed mode, as ``jit`` uses), the graph replayed on new input data (checked against
NumPy, and bit for bit against an eager call on that data), then one more eager call on the same
handle (does a failed capture leave the handle usable?). Workspaces, info arrays and params
objects are made before the capture. The dense @ CSR forms are ``probe_dense_csr``'s. Prints one
JSON line per candidate and shape, then a summary line each. ``cupygraph/linalg/_routes.py``
records what it found.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import probe_dense_csr

VECTOR, LOWER = 1, 0
R_32F, R_64F = 0, 1
EIGH = ["syevd", "syevj", "syevj_batched", "xsyevd", "xsyev_batched"]
SVD = ["gesvd", "gesvdj", "gesvdj_batched", "xgesvd", "xgesvdp"]
EIGH_SIZES = [8, 32, 48]
SVD_SHAPES = [(12, 8), (32, 32), (48, 40)]


def nvmath_binding(name: str) -> Any:
    """``nvmath.bindings.<name>``: optional, imported by name as cupygraph.linalg imports it."""
    return importlib.import_module(f"nvmath.bindings.{name}")


def _dtype_code(dtype: Any) -> int:
    return R_32F if dtype.char == "f" else R_64F


class Case:
    """One routine on one shape: ``run()`` queues copy-in + the routine on ``stream``; ``check()`` compares."""

    def __init__(self, kind: str, routine: str, shape: tuple[int, ...], dtype: Any, seed: int):
        import cupy
        import numpy as np
        sd = nvmath_binding("cusolverDn")

        self.kind, self.routine, self.shape, self.dtype = kind, routine, shape, np.dtype(dtype)
        self.lib = sd
        self.h = int(sd.create())
        self.stream = cupy.cuda.Stream(non_blocking=True)
        sd.set_stream(self.h, self.stream.ptr)
        self.params = int(sd.create_params())
        self.syevj = int(sd.create_syevj_info())
        self.gesvdj = int(sd.create_gesvdj_info())
        self.rng = np.random.default_rng(seed)
        with self.stream:
            self.source = cupy.empty(shape, dtype=self.dtype, order="F")
            self.work = cupy.empty(shape, dtype=self.dtype, order="F")
            self.info = cupy.zeros(1, dtype=cupy.int32)
            self.new_input()
            self._prepare()
        self.stream.synchronize()

    def new_input(self) -> Any:
        import cupy

        a = self.rng.standard_normal(self.shape)
        if self.kind == "eigh":
            a = a + a.T
        self.host = a.astype(self.dtype)
        with self.stream:
            self.source[...] = cupy.asarray(self.host)
        return self.host

    def _prepare(self) -> None:
        import cupy
        import numpy as np

        sd, h, dt, p = self.lib, self.h, self.dtype, "s" if self.dtype.char == "f" else "d"
        w = self.work.data.ptr
        self.host_bytes = 0
        if self.kind == "eigh":
            n = self.shape[0]
            self.w = cupy.empty(n, dt)
            args = (VECTOR, LOWER, n, w, n, self.w.data.ptr)
            if self.routine == "syevd":
                lwork = getattr(sd, p + "syevd_buffer_size")(h, *args)
            elif self.routine == "syevj":
                lwork = getattr(sd, p + "syevj_buffer_size")(h, *args, self.syevj)
            elif self.routine == "syevj_batched":
                lwork = getattr(sd, p + "syevj_batched_buffer_size")(h, *args, self.syevj, 1)
            else:
                code = _dtype_code(dt)
                xargs = (self.params, VECTOR, LOWER, n, code, w, n, code, self.w.data.ptr, code)
                if self.routine == "xsyevd":
                    dev, host = sd.xsyevd_buffer_size(h, *xargs)
                else:
                    dev, host = sd.xsyev_batched_buffer_size(h, *xargs, 1)
                self.xargs, self.host_bytes = xargs, int(host)
                self.scratch = cupy.empty(max(int(dev), 1), cupy.uint8)
                self.dev_bytes = int(dev)
                self.hbuf = np.empty(max(int(host), 1), np.uint8)
                return
            self.lwork = int(lwork)
            self.scratch = cupy.empty(max(self.lwork, 1), dt)
            return
        m, n = self.shape
        k = min(m, n)
        self.s = cupy.empty(k, dt)
        if self.routine in ("gesvd", "xgesvd"):
            self.u, self.v = cupy.empty((m, k), dt, order="F"), cupy.empty((k, n), dt, order="F")  # v holds VT
        elif self.routine == "gesvdj_batched":
            self.u, self.v = cupy.empty((m, m), dt, order="F"), cupy.empty((n, n), dt, order="F")
        else:  # gesvdj (econ), xgesvdp (econ): V, not VT
            self.u, self.v = cupy.empty((m, k), dt, order="F"), cupy.empty((n, k), dt, order="F")
        self.rwork = cupy.empty(max(k - 1, 1), dt)
        ldu, ldv = m, self.v.shape[0]
        if self.routine == "gesvd":
            self.lwork = int(getattr(sd, p + "gesvd_buffer_size")(h, m, n))
        elif self.routine == "gesvdj":
            self.lwork = int(getattr(sd, p + "gesvdj_buffer_size")(h, VECTOR, 1, m, n, w, m, self.s.data.ptr,
                                                                    self.u.data.ptr, ldu, self.v.data.ptr, ldv,
                                                                    self.gesvdj))
        elif self.routine == "gesvdj_batched":
            self.lwork = int(getattr(sd, p + "gesvdj_batched_buffer_size")(
                h, VECTOR, m, n, w, m, self.s.data.ptr, self.u.data.ptr, ldu, self.v.data.ptr, ldv, self.gesvdj, 1))
        else:
            code = _dtype_code(dt)
            if self.routine == "xgesvd":
                xargs = (self.params, ord("S"), ord("S"), m, n, code, w, m, code, self.s.data.ptr, code,
                         self.u.data.ptr, ldu, code, self.v.data.ptr, ldv, code)
                dev, host = sd.xgesvd_buffer_size(h, *xargs)
            else:
                xargs = (self.params, VECTOR, 1, m, n, code, w, m, code, self.s.data.ptr, code, self.u.data.ptr, ldu,
                         code, self.v.data.ptr, ldv, code)
                dev, host = sd.xgesvdp_buffer_size(h, *xargs)
            self.xargs, self.host_bytes, self.dev_bytes = xargs, int(host), int(dev)
            self.scratch = cupy.empty(max(int(dev), 1), cupy.uint8)
            self.hbuf = np.empty(max(int(host), 1), np.uint8)
            return
        self.scratch = cupy.empty(max(self.lwork, 1), dt)

    def run(self) -> None:
        """Copy the source into the work matrix and call the routine, all on ``self.stream``."""
        sd, h, p = self.lib, self.h, "s" if self.dtype.char == "f" else "d"
        with self.stream:
            self.work[...] = self.source
            w, info = self.work.data.ptr, self.info.data.ptr
            if self.kind == "eigh":
                n = self.shape[0]
                args = (VECTOR, LOWER, n, w, n, self.w.data.ptr)
                if self.routine == "syevd":
                    getattr(sd, p + "syevd")(h, *args, self.scratch.data.ptr, self.lwork, info)
                elif self.routine == "syevj":
                    getattr(sd, p + "syevj")(h, *args, self.scratch.data.ptr, self.lwork, info, self.syevj)
                elif self.routine == "syevj_batched":
                    getattr(sd, p + "syevj_batched")(h, *args, self.scratch.data.ptr, self.lwork, info, self.syevj, 1)
                elif self.routine == "xsyevd":
                    sd.xsyevd(h, *self.xargs, self.scratch.data.ptr, self.dev_bytes, self.hbuf.ctypes.data,
                              self.host_bytes, info)
                else:
                    sd.xsyev_batched(h, *self.xargs, self.scratch.data.ptr, self.dev_bytes, self.hbuf.ctypes.data,
                                     self.host_bytes, info, 1)
                return
            m, n = self.shape
            s, u, v, ldv = self.s.data.ptr, self.u.data.ptr, self.v.data.ptr, self.v.shape[0]
            if self.routine == "gesvd":
                getattr(sd, p + "gesvd")(h, ord("S"), ord("S"), m, n, w, m, s, u, m, v, ldv, self.scratch.data.ptr,
                                         self.lwork, self.rwork.data.ptr, info)
            elif self.routine == "gesvdj":
                getattr(sd, p + "gesvdj")(h, VECTOR, 1, m, n, w, m, s, u, m, v, ldv, self.scratch.data.ptr,
                                          self.lwork, info, self.gesvdj)
            elif self.routine == "gesvdj_batched":
                getattr(sd, p + "gesvdj_batched")(h, VECTOR, m, n, w, m, s, u, m, v, ldv, self.scratch.data.ptr,
                                                  self.lwork, info, self.gesvdj, 1)
            elif self.routine == "xgesvd":
                sd.xgesvd(h, *self.xargs, self.scratch.data.ptr, self.dev_bytes, self.hbuf.ctypes.data,
                          self.host_bytes, info)
            else:
                sd.xgesvdp(h, *self.xargs, self.scratch.data.ptr, self.dev_bytes, self.hbuf.ctypes.data,
                           self.host_bytes, info)

    def outputs(self) -> list[Any]:
        if self.kind == "eigh":
            return [self.w, self.work]
        return [self.s, self.u, self.v]

    def poison(self) -> None:
        for out in self.outputs():
            out.fill(float("nan"))
        self.info.fill(-7)

    def check(self) -> str:
        """"" when the outputs are a correct decomposition of ``self.host``, else what is wrong."""
        import cupy
        import numpy as np

        self.stream.synchronize()
        a = self.host.astype(np.float64)
        tol = 1e-4 if self.dtype.char == "f" else 1e-10
        info = int(self.info.get()[0])
        if info != 0:
            return f"info {info}"
        if self.kind == "eigh":
            w, v = (cupy.asnumpy(x).astype(np.float64) for x in (self.w, self.work))
            want = np.linalg.eigvalsh(a)
            if not np.allclose(w, want, rtol=tol, atol=tol * np.abs(want).max()):
                return f"eigenvalues off by {np.abs(w - want).max():.3g}"
            if np.abs(a @ v - v * w).max() > tol * 100 * np.abs(want).max():
                return f"eigenvectors: residual {np.abs(a @ v - v * w).max():.3g}"
            return ""
        m, n = self.shape
        k = min(m, n)
        s, u, v = (cupy.asnumpy(x).astype(np.float64) for x in (self.s, self.u, self.v))
        want = np.linalg.svd(a, compute_uv=False)
        if not np.allclose(s, want, rtol=tol, atol=tol * want.max()):
            return f"singular values off by {np.abs(s - want).max():.3g} (first {s[:3]} vs {want[:3]})"
        vt = v if self.routine in ("gesvd", "xgesvd") else v[:, :k].T
        rebuilt = u[:, :k] * s @ vt[:k]
        if np.abs(rebuilt - a).max() > tol * 100 * want.max():
            return f"U S Vt differs from A by {np.abs(rebuilt - a).max():.3g}"
        return ""

    def snapshot(self) -> list[Any]:
        import cupy

        self.stream.synchronize()
        return [cupy.asnumpy(x) for x in self.outputs()]


def capture(case: Any) -> tuple[Any, str]:
    """(graph or None, error text) of ``case.run()`` captured on its stream."""
    graph, error = None, ""
    case.stream.begin_capture()
    try:
        case.run()
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    finally:
        try:
            graph = case.stream.end_capture()
        except Exception as err:
            error = error or f"end_capture: {type(err).__name__}: {err}"
            graph = None
    return (None if error else graph), error


def probe_solver(kind: str, routine: str, shape: tuple[int, ...], dtype: str) -> dict[str, Any]:
    import numpy as np

    row: dict[str, Any] = {"kind": kind, "routine": routine, "shape": list(shape), "dtype": dtype}
    case = Case(kind, routine, shape, np.dtype(dtype), seed=1)
    row["host_workspace_bytes"] = case.host_bytes
    case.poison()
    try:
        case.run()
        row["eager"] = case.check() or "ok"
    except Exception as err:
        row["eager"] = f"{type(err).__name__}: {err}"
        return row
    first = case.snapshot()
    same = True
    for _ in range(10):
        case.poison()
        case.run()
        same = same and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first, case.snapshot()))
    row["eager_deterministic_10_runs"] = same
    problems = []
    for _ in range(5):  # more inputs: a routine that is right on one matrix may not be on the next
        case.new_input()
        case.poison()
        case.run()
        problems.append(case.check())
    row["eager_5_more_inputs"] = next((p for p in problems if p), "ok")
    graph, error = capture(case)
    row["capture"] = error or "ok"
    if graph is not None:
        case.new_input()
        case.poison()
        graph.launch(case.stream)
        row["replay"] = case.check() or "ok"
        replayed = case.snapshot()
        case.poison()
        case.run()
        eager = case.snapshot()
        row["replay_equals_eager_bitwise"] = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(replayed, eager))
    try:
        case.new_input()
        case.poison()
        case.run()
        row["eager_after_capture"] = case.check() or "ok"
    except Exception as err:
        row["eager_after_capture"] = f"{type(err).__name__}: {err}"
    return row


def child(spec: str) -> None:
    kind, routine, shape, dtype = json.loads(spec)
    try:
        row = (probe_dense_csr.probe(routine, dtype) if kind == "dense@csr"
               else probe_solver(kind, routine, tuple(shape), dtype))
    except Exception as err:
        row = {"kind": kind, "routine": routine, "shape": shape, "dtype": dtype,
               "crashed": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-800:]}
    print("ROW " + json.dumps(row), flush=True)


def specs() -> list[list[Any]]:
    out: list[list[Any]] = []
    for routine in EIGH:
        out += [["eigh", routine, [n, n], "float64"] for n in EIGH_SIZES]
        out.append(["eigh", routine, [8, 8], "float32"])
    for routine in SVD:
        out += [["svd", routine, list(shape), "float64"] for shape in SVD_SHAPES]
        out.append(["svd", routine, [12, 8], "float32"])
    out += [["dense@csr", form, [], dtype] for form in probe_dense_csr.FORMS for dtype in ("float32", "float64")]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--jobs", type=int, default=8, help="candidates probed at once (one process each)")
    args = parser.parse_args()
    if args.one:
        child(args.one)
        return 0
    import cupy

    card = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    versions = {"card": card, "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "cupy": cupy.__version__}
    try:
        versions["cusolver"] = nvmath_binding("cusolver").get_version()
    except Exception as err:
        versions["cusolver"] = str(err)
    print("VERSIONS " + json.dumps(versions), flush=True)
    def one(spec: list[Any]) -> dict[str, Any]:
        try:
            done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                                  text=True, timeout=90)
        except subprocess.TimeoutExpired:
            return {"spec": spec, "crashed": "timed out after 90 s"}
        found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
        if found:
            row: dict[str, Any] = json.loads(found[-1])
            return row
        return {"spec": spec, "crashed": f"exit {done.returncode}: {done.stderr.strip()[-600:]}"}

    # Separate processes (a failed capture or a sticky error stays in its own), several at a time.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(one, specs()))
    for row in rows:
        print(json.dumps(row), flush=True)
    for row in rows:
        print(f"{row.get('kind', '?'):9} {row.get('routine', row.get('spec'))!s:22} {row.get('shape', '')!s:10} "
              f"{row.get('dtype', ''):8} eager={row.get('eager', row.get('crashed', ''))!s:.60} "
              f"capture={row.get('capture', '-')!s:.90} replay={row.get('replay', '-')} "
              f"bitwise={row.get('replay_equals_eager_bitwise', '-')} "
              f"after={row.get('eager_after_capture', '-')!s:.60} det20={row.get('eager_deterministic_20_runs', '-')} "
              f"det10={row.get('eager_deterministic_10_runs', '-')} more={row.get('eager_5_more_inputs', '-')!s:.50}",
              flush=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"versions": versions, "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
