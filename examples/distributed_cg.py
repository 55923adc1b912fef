"""Conjugate gradients split across ranks: the dot products are all_reduces inside the graphed iterations.

    mpiexec -n 2 python examples/distributed_cg.py --n 4096 --per-call 20

Solves the 1-D Poisson system ``A x = b`` (``A`` = tridiag(-1, 2, -1), zero boundary values),
each rank holding ``n / ranks`` consecutive unknowns. One call of the graphed function runs
``--per-call`` CG iterations: per iteration a halo exchange of one value with each neighbour
(``sendrecv``), the matrix-vector product, and two ``all_reduce`` dot products, all on the device
and recorded in one graph. The convergence test is a host loop around the calls (one read of the
residual per call): collectives cannot sit in a CUDA conditional node, so ``cupygraph.while_loop``
is not an option here (it would be refused with ``collective_in_conditional``).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from cupygraph import distributed as dist


class Poisson1D:
    """This rank's unknowns of the 1-D Poisson system and the graphed CG iterations over them."""

    def __init__(self, comm: dist.Communicator, n: int, xp: Any):
        if n % comm.size:
            raise ValueError(f"--n {n} must divide by the {comm.size} ranks")
        self.comm, self.xp, self.m = comm, xp, n // comm.size
        self.first = comm.rank * self.m
        self.left = comm.rank - 1 if comm.rank > 0 else None
        self.right = comm.rank + 1 if comm.rank < comm.size - 1 else None

    def rhs(self, seed: int = 0) -> Any:
        """This rank's rows of a random right-hand side (the same global vector on any rank count)."""
        n = self.m * self.comm.size
        every = np.random.default_rng(seed).standard_normal(n)
        return self.xp.asarray(every[self.first: self.first + self.m])

    def matvec(self, p: Any) -> Any:
        xp, comm = self.xp, self.comm
        before, after = xp.zeros(1, p.dtype), xp.zeros(1, p.dtype)  # zero boundary values
        with comm.group():
            if self.left is not None:
                comm.send(p[:1], self.left)
                comm.recv(before, self.left)
            if self.right is not None:
                comm.send(p[-1:], self.right)
                comm.recv(after, self.right)
        padded = xp.concatenate([before, p, after])
        return 2 * p - padded[:-2] - padded[2:]

    def dot(self, a: Any, b: Any) -> Any:
        return self.comm.all_reduce(self.xp.sum(a * b, keepdims=True))

    def iterate(self, state: Any, rr: Any, count: int) -> tuple[Any, Any]:
        """``count`` CG iterations from ``state`` (columns x, r, p) and ``rr`` = r.r; no host reads."""
        xp = self.xp
        x, r, p = (xp.ascontiguousarray(state[:, k]) for k in range(3))
        for _ in range(count):
            ap = self.matvec(p)
            alpha = rr / self.dot(p, ap)
            x = x + alpha * p
            r = r - alpha * ap
            rr_next = self.dot(r, r)
            p = r + (rr_next / rr) * p
            rr = rr_next
        return xp.stack([x, r, p], axis=1), rr


def solve(comm: dist.Communicator, n: int, per_call: int, tol: float, max_calls: int) -> dict[str, Any]:
    xp = np if comm.backend_name == "host" else __import__("cupy")
    system = Poisson1D(comm, n, xp)
    b = system.rhs()

    def iterate(state: Any, rr: Any) -> tuple[Any, Any]:
        return system.iterate(state, rr, per_call)

    # Each rank's unknowns are the batch axis, captured at exactly that size; every rank has as many.
    graphed = dist.jit(iterate, comm=comm, equal_batches=True, config=dict(capture_sizes=[system.m]))
    state = xp.stack([xp.zeros_like(b), b, b], axis=1)  # x = 0, r = p = b
    rr = system.dot(b, b)
    calls = 0
    while float(rr[0]) > tol * tol and calls < max_calls:  # the host loop: one read per call
        state, rr = graphed(state, rr)
        calls += 1
    x = xp.ascontiguousarray(state[:, 0])
    residual = b - system.matvec(x)
    norm = float(xp.sqrt(system.dot(residual, residual))[0])
    return {"calls": calls, "iterations": calls * per_call, "residual": norm, "x": x,
            "stats": graphed.stats().to_dict()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--per-call", type=int, default=16)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--max-calls", type=int, default=200)
    parser.add_argument("--backend", default="auto", choices=["auto", "cupy", "host"])
    args = parser.parse_args(argv)
    comm = dist.init(backend=args.backend)
    result = solve(comm, args.n, args.per_call, args.tol, args.max_calls)
    if comm.rank == 0:
        print(f"{comm.size} ranks, n={args.n}: {result['iterations']} CG iterations in {result['calls']} graph "
              f"calls, |b - A x| = {result['residual']:.3g}")
    return result
if __name__ == "__main__":
    main()
