"""Conjugate gradient for the 2-D Poisson equation: the whole solve in one CUDA graph launch.

Solves A x = b where A is the 5-point Laplacian (Dirichlet, zero outside an n x n grid):
(A x)[i, j] = 4 x[i, j] - x[i-1, j] - x[i+1, j] - x[i, j-1] - x[i, j+1]. CG iterates until the
residual norm squared drops below tol**2 (or max_iters). Every step is a RawKernel (stencil fused
with a dot product, axpys fused with the next dot product, the scalar updates in one-block
kernels), every scalar stays on the device, and the loop is ``cupygraph.while_loop``: under
``cupygraph.jit`` the convergence test runs on the device, so one graph launch solves the system.

``cg_host_loop`` is the reference: the same kernels, with the residual read back on the host every
iteration, as one would write it in plain CuPy. Without a GPU both run on NumPy (the host backend).

    python examples/cg_poisson.py --n 128 --tol 1e-6
"""

from __future__ import annotations

import argparse
import time
from typing import Any, ClassVar

import numpy as np

import cupygraph

BLOCK = 256
MAX_PARTS = 1024  # partial sums per dot product; one block then adds them in a fixed order

_SOURCE = r"""
#define BLOCK 256

// Sum `v` over the block in a fixed tree order (deterministic); the result lands in thread 0.
__device__ double block_sum(double v) {
    __shared__ double cache[BLOCK];
    cache[threadIdx.x] = v;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) cache[threadIdx.x] += cache[threadIdx.x + stride];
        __syncthreads();
    }
    return cache[0];
}

__device__ double sum_parts(const double* part, int parts) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < parts; i += BLOCK) acc += part[i];
    return block_sum(acc);
}

// x = 0, r = p = b; partial sums of r.r
extern "C" __global__ void cg_init(const double* b, double* x, double* r, double* p, double* part,
                                   long long total) {
    double acc = 0.0;
    for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK) {
        double v = b[i];
        x[i] = 0.0; r[i] = v; p[i] = v;
        acc += v * v;
    }
    double s = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// rr = sum(part); go = rr >= tol2   (one block)
extern "C" __global__ void cg_start(const double* part, int parts, double* rr, int* go, double tol2) {
    double s = sum_parts(part, parts);
    if (threadIdx.x == 0) { *rr = s; *go = s >= tol2; }
}

// Ap = A p on the n x n grid; partial sums of p.Ap
extern "C" __global__ void cg_stencil_dot(const double* p, double* Ap, double* part, int n) {
    long long total = (long long)n * n;
    double acc = 0.0;
    for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK) {
        int x = (int)(i % n);
        int y = (int)(i / n);
        double c = p[i];
        double v = 4.0 * c;
        if (x > 0) v -= p[i - 1];
        if (x < n - 1) v -= p[i + 1];
        if (y > 0) v -= p[i - n];
        if (y < n - 1) v -= p[i + n];
        Ap[i] = v;
        acc += c * v;
    }
    double s = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// alpha = rr / p.Ap   (one block)
extern "C" __global__ void cg_alpha(const double* part, int parts, const double* rr, double* alpha) {
    double pap = sum_parts(part, parts);
    if (threadIdx.x == 0) *alpha = pap != 0.0 ? *rr / pap : 0.0;
}

// x += alpha p; r -= alpha Ap; partial sums of r.r
extern "C" __global__ void cg_update_xr(double* x, double* r, const double* p, const double* Ap,
                                        const double* alpha, double* part, long long total) {
    double a = *alpha;
    double acc = 0.0;
    for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK) {
        x[i] += a * p[i];
        double v = r[i] - a * Ap[i];
        r[i] = v;
        acc += v * v;
    }
    double s = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// beta = rr_new / rr; rr = rr_new; go = rr_new >= tol2   (one block)
extern "C" __global__ void cg_beta(const double* part, int parts, double* rr, double* beta, int* go, double tol2) {
    double s = sum_parts(part, parts);
    if (threadIdx.x == 0) {
        double old = *rr;
        *beta = old != 0.0 ? s / old : 0.0;
        *rr = s;
        *go = s >= tol2;
    }
}

// p = r + beta p
extern "C" __global__ void cg_update_p(double* p, const double* r, const double* beta, long long total) {
    double bt = *beta;
    for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK) {
        p[i] = r[i] + bt * p[i];
    }
}
"""


def _parts(total: int) -> int:
    return max(1, min(MAX_PARTS, (total + BLOCK - 1) // BLOCK))


class CupyCG:
    """The CG steps as RawKernels on one n x n grid; every scalar is a device array."""

    _kernels: ClassVar[dict[int, dict[str, Any]]] = {}  # per device: compiled once, looked up without the driver

    def __init__(self, n: int):
        import cupy

        device = cupy.cuda.Device().id
        if device not in self._kernels:
            module = cupy.RawModule(code=_SOURCE, options=("--std=c++17",))
            self._kernels[device] = {name: module.get_function(name) for name in (
                "cg_init", "cg_start", "cg_stencil_dot", "cg_alpha", "cg_update_xr", "cg_beta", "cg_update_p")}
        self.k = self._kernels[device]
        self.n, self.total = n, n * n
        self.parts = _parts(self.total)
        self.grid, self.one = (self.parts,), (1,)

    def init(self, b, x, r, p, part):
        self.k["cg_init"](self.grid, (BLOCK,), (b, x, r, p, part, np.int64(self.total)))

    def start(self, part, rr, go, tol2):
        self.k["cg_start"](self.one, (BLOCK,), (part, np.int32(self.parts), rr, go, np.float64(tol2)))

    def stencil_dot(self, p, Ap, part):
        self.k["cg_stencil_dot"](self.grid, (BLOCK,), (p, Ap, part, np.int32(self.n)))

    def alpha(self, part, rr, alpha):
        self.k["cg_alpha"](self.one, (BLOCK,), (part, np.int32(self.parts), rr, alpha))

    def update_xr(self, x, r, p, Ap, alpha, part):
        self.k["cg_update_xr"](self.grid, (BLOCK,), (x, r, p, Ap, alpha, part, np.int64(self.total)))

    def beta(self, part, rr, beta, go, tol2):
        self.k["cg_beta"](self.one, (BLOCK,), (part, np.int32(self.parts), rr, beta, go, np.float64(tol2)))

    def update_p(self, p, r, beta):
        self.k["cg_update_p"](self.grid, (BLOCK,), (p, r, beta, np.int64(self.total)))


def _safe_ratio(num, den):
    """num / den, 0 where den is 0, without reading either to the host (as the GPU kernels do)."""
    nonzero = den != 0.0
    return np.where(nonzero, num / np.where(nonzero, den, 1.0), 0.0)


class NumpyCG:
    """The same steps in NumPy (one partial sum), for machines without a GPU."""

    def __init__(self, n: int):
        self.n, self.parts = n, 1

    def init(self, b, x, r, p, part):
        x[...] = 0.0
        r[...] = b
        p[...] = b
        part[:1] = np.sum(r * r)

    def start(self, part, rr, go, tol2):
        rr[...] = part[0]
        go[...] = rr >= tol2

    def stencil_dot(self, p, Ap, part):
        grid = p.reshape(self.n, self.n)
        out = Ap.reshape(self.n, self.n)
        out[...] = 4.0 * grid
        out[1:, :] -= grid[:-1, :]
        out[:-1, :] -= grid[1:, :]
        out[:, 1:] -= grid[:, :-1]
        out[:, :-1] -= grid[:, 1:]
        part[:1] = np.sum(p * Ap)

    def alpha(self, part, rr, alpha):
        alpha[...] = _safe_ratio(rr, part[0])

    def update_xr(self, x, r, p, Ap, alpha, part):
        x += alpha * p
        r -= alpha * Ap
        part[:1] = np.sum(r * r)

    def beta(self, part, rr, beta, go, tol2):
        beta[...] = _safe_ratio(part[0], rr)
        rr[...] = part[0]
        go[...] = rr >= tol2

    def update_p(self, p, r, beta):
        p *= beta
        p += r


def _setup(b: Any, tol: float) -> tuple[Any, Any, dict]:
    """Operations and work arrays for right-hand side ``b`` of shape (1, n, n), float64."""
    if b.ndim != 3 or b.shape[0] != 1 or b.shape[1] != b.shape[2] or b.dtype != np.float64:
        raise ValueError(f"b must be float64 of shape (1, n, n), got {b.dtype}{list(b.shape)}")
    n = b.shape[-1]
    if isinstance(b, np.ndarray):
        xp, ops = np, NumpyCG(n)
    else:
        import cupy

        xp, ops = cupy, CupyCG(n)
    state = dict(
        x=xp.empty_like(b), r=xp.empty_like(b), p=xp.empty_like(b), Ap=xp.empty_like(b),
        part=xp.empty(ops.parts, dtype=np.float64), rr=xp.empty((), dtype=np.float64),
        alpha=xp.empty((), dtype=np.float64), beta=xp.empty((), dtype=np.float64),
        go=xp.empty((), dtype=np.int32),
    )
    s = state
    ops.init(b, s["x"], s["r"], s["p"], s["part"])
    ops.start(s["part"], s["rr"], s["go"], tol * tol)
    return xp, ops, state


def _iteration(ops: Any, s: dict, tol2: float) -> None:
    ops.stencil_dot(s["p"], s["Ap"], s["part"])
    ops.alpha(s["part"], s["rr"], s["alpha"])
    ops.update_xr(s["x"], s["r"], s["p"], s["Ap"], s["alpha"], s["part"])
    ops.beta(s["part"], s["rr"], s["beta"], s["go"], tol2)
    ops.update_p(s["p"], s["r"], s["beta"])


def cg_solve(b: Any, tol: float, max_iters: int) -> tuple[Any, Any, Any]:
    """(x, iterations, residual norm squared); the loop is a device while loop under capture."""
    _, ops, s = _setup(b, tol)
    tol2 = tol * tol
    iterations = cupygraph.while_loop(lambda: s["go"], lambda: _iteration(ops, s, tol2), max_iters=max_iters)
    return s["x"], iterations, s["rr"]


def cg_host_loop(b: Any, tol: float, max_iters: int) -> tuple[Any, int, float]:
    """The reference: same kernels, the residual read back on the host every iteration."""
    _, ops, s = _setup(b, tol)
    tol2 = tol * tol
    iterations = 0
    while float(s["rr"]) >= tol2 and iterations < max_iters:
        _iteration(ops, s, tol2)
        iterations += 1
    return s["x"], iterations, float(s["rr"])


def make_solver(config: Any = None) -> cupygraph.GraphedFunction:
    """``cg_solve`` under ``cupygraph.jit``: one graph per grid size, tol and max_iters static."""
    return cupygraph.jit(cg_solve, config=config, batch_argnums=(0,), static_argnums=(1, 2))


def poisson_rhs(xp: Any, n: int, seed: int = 0) -> Any:
    """A smooth source plus noise, shape (1, n, n), float64 (never all zeros)."""
    rng = np.random.default_rng(seed)
    coords = (np.arange(n) + 1.0) / (n + 1.0)
    smooth = np.outer(np.sin(np.pi * coords), np.sin(2 * np.pi * coords))
    b = (smooth + 0.1 * rng.standard_normal((n, n))).reshape(1, n, n)
    return xp.asarray(b, dtype=np.float64)


def residual_norm(b: Any, x: Any) -> float:
    """||b - A x|| computed independently of the solver (NumPy, on the host)."""
    b = np.asarray(b.get() if hasattr(b, "get") else b).reshape(b.shape[-1], -1)
    x = np.asarray(x.get() if hasattr(x, "get") else x).reshape(b.shape)
    ax = 4.0 * x
    ax[1:, :] -= x[:-1, :]
    ax[:-1, :] -= x[1:, :]
    ax[:, 1:] -= x[:, :-1]
    ax[:, :-1] -= x[:, 1:]
    return float(np.linalg.norm(b - ax))


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=128, help="grid side (n x n unknowns)")
    parser.add_argument("--tol", type=float, default=1e-6, help="stop when the residual norm is below this")
    parser.add_argument("--max-iters", type=int, default=None, help="iteration cap (default 10 n)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    max_iters = args.max_iters if args.max_iters is not None else 10 * args.n

    if cupygraph.gpu_available():
        import cupy

        xp, sync = cupy, cupy.cuda.Device().synchronize
    else:
        xp, sync = np, (lambda: None)
        print("no GPU: running the NumPy version on the host backend")
    b = poisson_rhs(xp, args.n)
    solve = make_solver()

    def timed(fn):
        best, out = float("inf"), None
        for _ in range(args.repeats):
            sync()
            start = time.perf_counter()
            out = fn()
            sync()
            best = min(best, time.perf_counter() - start)
        return out, best

    (x, iters, rr), graph_s = timed(lambda: solve(b, args.tol, max_iters))
    (x_ref, iters_ref, rr_ref), host_s = timed(lambda: cg_host_loop(b, args.tol, max_iters))
    print(f"grid {args.n}x{args.n}, tol {args.tol:g}, backend {solve.backend.name}")
    print(f"  jit + while_loop   : {int(iters):5d} iterations, residual {float(rr) ** 0.5:.3e} "
          f"(recomputed {residual_norm(b, x):.3e}), {1e3 * graph_s:8.2f} ms")
    print(f"  host-checked loop  : {iters_ref:5d} iterations, residual {rr_ref ** 0.5:.3e} "
          f"(recomputed {residual_norm(b, x_ref):.3e}), {1e3 * host_s:8.2f} ms")
    stats = solve.stats()
    print(f"  graphs captured {stats.captures}, fallbacks {stats.fallbacks}")


if __name__ == "__main__":
    main()
