"""A 2-D heat equation split across ranks by rows, halo rows exchanged with send/recv inside the graph.

Run one process per GPU (or per CPU rank on the host backend):

    mpiexec -n 2 python examples/distributed_heat.py --n 1024 --steps 20 --calls 5

Each rank holds ``n / ranks`` rows of the ``n x n`` grid plus one ghost row above and below. One
call of the graphed step runs ``--steps`` explicit steps; each step swaps ghost rows with the
neighbouring ranks (``comm.sendrecv``, NCCL on the GPU) and applies the 5-point stencil. The grid's
edges are held at their initial values. The slab's rows are the batch axis, captured at exactly
that size; the coefficient is a one-element array read by the graph. At the end
every rank's rows are gathered and compared with the same number of steps on one rank alone:
the same kernel on the same numbers, so they agree bit for bit.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import cupygraph as cg
from cupygraph import distributed as dist

_STENCIL = r"""
extern "C" __global__ void heat_step(const float* u, float* v, const float* coef, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (i >= rows - 1 || j >= cols) return;
    int k = i * cols + j;
    if (j == 0 || j == cols - 1) { v[k] = u[k]; return; }
    v[k] = u[k] + coef[0] * (u[k - cols] + u[k + cols] + u[k - 1] + u[k + 1] - 4.0f * u[k]);
}
"""


def initial_rows(xp: Any, first: int, count: int, n: int) -> Any:
    """Rows ``first .. first+count`` of the global initial grid (the same numbers on every rank)."""
    i = xp.arange(first, first + count, dtype=xp.float64)[:, None]
    j = xp.arange(n, dtype=xp.float64)[None, :]
    noise = xp.sin(i * 12.9898 + j * 78.233) * 43758.5453
    return (noise - xp.floor(noise)).astype(xp.float32)


class Slab:
    """One rank's rows of the grid with ghost rows, and the step that advances them.

    The state is an array of ``rows`` rows (ghost rows included) that ``advance`` replaces.
    """

    def __init__(self, comm: dist.Communicator | None, n: int, xp: Any):
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        if n % size:
            raise ValueError(f"--n {n} must divide by the {size} ranks")
        self.comm, self.xp, self.n, self.rows = comm, xp, n, n // size + 2
        self.up = rank - 1 if rank > 0 else None
        self.down = rank + 1 if rank < size - 1 else None
        first = rank * (n // size)
        # Ghost rows on the grid's edge hold the boundary (the first and last global rows) fixed.
        top, bottom = max(first - 1, 0), min(first + n // size, n - 1)
        self._edges = (first, top, bottom)
        self._kernel = xp.RawKernel(_STENCIL, "heat_step") if xp.__name__ == "cupy" else None

    def initial(self) -> Any:
        """This rank's rows of the initial grid, ghost rows included."""
        xp, n = self.xp, self.n
        (first, top, bottom), count = self._edges, self.rows - 2
        u = initial_rows(xp, first, count, n)
        return xp.ascontiguousarray(xp.concatenate([initial_rows(xp, top, 1, n), u, initial_rows(xp, bottom, 1, n)]))

    def exchange(self, u: Any) -> None:
        comm = self.comm
        if comm is None:
            return
        with comm.group():
            if self.up is not None:
                comm.send(u[1], self.up)
                comm.recv(u[0], self.up)
            if self.down is not None:
                comm.send(u[-2], self.down)
                comm.recv(u[-1], self.down)

    def stencil(self, u: Any, v: Any, coef: Any) -> None:
        if self._kernel is not None:
            rows, cols = u.shape
            self._kernel(((cols + 127) // 128, rows - 2), (128, 1), (u, v, coef, np.int32(rows), np.int32(cols)))
        else:
            c = coef[0]
            inner = u[1:-1, 1:-1]
            around = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
            v[1:-1, 1:-1] = inner + c * (around - np.float32(4) * inner)
            v[1:-1, 0], v[1:-1, -1] = u[1:-1, 0], u[1:-1, -1]
        # The global edge rows never change: keep them in both buffers.
        if self.up is None:
            v[1] = u[1]
        if self.down is None:
            v[-2] = u[-2]

    def advance(self, coef: Any, u: Any, count: int) -> Any:
        """``count`` (even) steps from ``u``; a new array (ping-pong in two scratch buffers)."""
        a, b = u.copy(), u.copy()  # b too: its edge ghost rows are read (and their results dropped)
        for _ in range(count // 2):
            for src, dst in ((a, b), (b, a)):
                self.exchange(src)
                self.stencil(src, dst, coef)
        return a



def make_step(slab: Slab, steps: int, *, graphs: bool, backend: str) -> Any:
    """``step(coef, u) -> u`` advancing a slab's state by ``steps`` (even) steps, graphed or eager."""
    if steps % 2:
        raise ValueError(f"--steps must be even (ping-pong buffers), got {steps}")

    def advance(coef: Any, u: Any) -> Any:
        return slab.advance(coef, u, steps)

    if not graphs:
        return advance
    # The slab's rows are the batch axis, captured at exactly that size (no padding rows);
    # output_mode="view": the new state is the graph's output, copied in again next call.
    options = dict(batch_argnums=1, config=dict(backend=backend, capture_sizes=[slab.rows], output_mode="view"))
    if slab.comm is None:
        return cg.jit(advance, **options)
    return dist.jit(advance, comm=slab.comm, equal_batches=True, **options)


def run(comm: dist.Communicator, n: int, steps: int, calls: int, *, graphs: bool = True) -> dict[str, Any]:
    """Advance the distributed grid; rank 0 also runs it alone and compares (every rank returns)."""
    xp = np if comm.backend_name == "host" else __import__("cupy")
    coef = xp.full((1,), 0.2, dtype=xp.float32)
    slab = Slab(comm, n, xp)
    step, u = make_step(slab, steps, graphs=graphs, backend=comm.backend_name), slab.initial()
    for _ in range(calls):
        u = step(coef, u)
    gathered = comm.all_gather(xp.ascontiguousarray(u[1:-1]))
    result: dict[str, Any] = {"rank": comm.rank, "ranks": comm.size, "n": n, "steps": steps * calls}
    if comm.rank == 0:
        alone = Slab(None, n, xp)
        single, w = make_step(alone, steps, graphs=graphs, backend=comm.backend_name), alone.initial()
        for _ in range(calls):
            w = single(coef, w)
        result["worst"] = float(xp.abs(gathered - w[1:-1]).max())
        result["changed"] = float(xp.abs(w[1:-1] - initial_rows(xp, 0, n, n)).max())
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--backend", default="auto", choices=["auto", "cupy", "host"])
    args = parser.parse_args(argv)
    comm = dist.init(backend=args.backend)
    result = run(comm, args.n, args.steps, args.calls)
    if comm.rank == 0:
        print(f"{comm.size} ranks, {args.n}x{args.n} grid, {result['steps']} steps: distributed vs one rank "
              f"max |difference| = {result['worst']} (the field changed by up to {result['changed']:.3g})")
    return result


if __name__ == "__main__":
    main()
