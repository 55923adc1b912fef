"""Checks run on every rank under ``mpiexec -n 2`` (or more) by tests/unit/test_distributed_mpi.py.

Each check compares against a result every rank can compute alone (NumPy on the gathered inputs),
on fresh random data. A rank prints ``PASS <name>`` per check; any failure raises, and MPI aborts
the job so no rank is left waiting.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np

import cupygraph as cg
from cupygraph import distributed as dist


def random_rows(seed: int, rows: int, cols: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols))


def check_collectives(comm: dist.Communicator) -> None:
    r, n = comm.rank, comm.size
    mine = random_rows(100 + r, 4)
    everyone = [random_rows(100 + k, 4) for k in range(n)]
    np.testing.assert_array_equal(comm.all_reduce(mine, "max"), np.maximum.reduce(everyone))
    np.testing.assert_allclose(comm.all_reduce(mine), sum(everyone), rtol=1e-12)
    np.testing.assert_array_equal(comm.all_gather(mine), np.concatenate(everyone))
    big = random_rows(200 + r, 2 * n)
    total = sum(random_rows(200 + k, 2 * n) for k in range(n))
    np.testing.assert_allclose(comm.reduce_scatter(big), total[2 * r: 2 * r + 2], rtol=1e-12)
    x = random_rows(300 + r, 5)
    comm.broadcast(x, root=n - 1)
    np.testing.assert_array_equal(x, random_rows(300 + n - 1, 5))
    out = np.empty((4, 3))
    comm.sendrecv(mine, (r + 1) % n, out, (r - 1) % n)
    np.testing.assert_array_equal(out, everyone[(r - 1) % n])


def check_graphed_halo_exchange(comm: dist.Communicator) -> None:
    """A jitted step with a collective and a ring exchange: replays equal the eager function."""
    r, n = comm.rank, comm.size

    def step(u):
        left = np.empty_like(u[:1])
        comm.sendrecv(np.ascontiguousarray(u[-1:]), (r + 1) % n, left, (r - 1) % n)
        total = comm.all_reduce(np.ascontiguousarray(u.sum(axis=0, keepdims=True)))
        return u * 0.5 + left + total

    f = dist.jit(step, comm=comm, config=dict(backend="host", capture_sizes=[4, 8]))
    for call in range(4):
        u = random_rows(400 + 10 * call + r, 8)
        np.testing.assert_array_equal(f(u), step(u))
    stats = f.stats()
    assert stats.captures == 1 and stats.hits == 3 and stats.fallbacks == 0, stats.to_dict()


def check_piecewise_pieces_hold_collectives(comm: dist.Communicator) -> None:
    @cg.graph_break
    def between(x):
        return x * 1

    def fn(x):
        a = comm.all_reduce(x * 2)
        return comm.all_reduce(between(a) + 1)

    f = dist.jit(fn, comm=comm, config=dict(backend="host", mode="PIECEWISE", capture_sizes=[4]))
    for call in range(3):
        x = random_rows(450 + call + 9 * comm.rank, 4)
        np.testing.assert_array_equal(f(x), fn(x))
    stats = f.stats()
    # The call that captured ran the function as it is; the other two replayed.
    assert stats.captures == 1 and dict(stats.replays_by_mode) == {"PIECEWISE": 2}, stats.to_dict()


def check_unequal_batches_pad_to_the_largest(comm: dist.Communicator) -> None:
    r = comm.rank

    def scale(x):
        return x * comm.all_reduce(np.ascontiguousarray(x.sum(axis=0, keepdims=True)))

    f = dist.jit(scale, comm=comm, config=dict(backend="host", capture_sizes=[2, 4, 8]))
    rows = [3 + 2 * k for k in range(comm.size)]  # 3 on rank 0, 5 on rank 1, ...: all pad to the largest
    x = random_rows(500 + r, rows[r])
    got = f(x)
    # Every rank's sum over its rows (padding rows are pad_value 0 and add nothing).
    total = sum(random_rows(500 + k, rows[k]).sum(axis=0, keepdims=True) for k in range(comm.size))
    assert got.shape == x.shape
    np.testing.assert_allclose(got, x * total, rtol=1e-12)
    held = [e.key.descriptor.num_tokens for e in f.registry.entries()]
    assert held == [8], held  # one key, the same on every rank
    assert comm.agree_max(np.array([len(held)]))[0] == 1


def check_failed_capture_falls_back_on_every_rank(comm: dist.Communicator) -> None:
    r = comm.rank

    def reads_on_rank_zero(x):
        y = comm.all_reduce(np.ascontiguousarray(x))
        if r == 0:
            float(y.sum())  # a host read: refused under capture on this rank only
        return y * 2

    f = dist.jit(reads_on_rank_zero, comm=comm, config=dict(backend="host", capture_sizes=[4]))
    for call in range(3):
        x = random_rows(600 + call + 7 * r, 4)
        mine = comm.all_gather(x)  # every rank's x, to compute the sum here
        want = 2 * sum(mine[4 * k: 4 * k + 4] for k in range(comm.size))
        np.testing.assert_allclose(f(x), want, rtol=1e-12)
    stats = f.stats()
    assert f.registry.num_graphs() == 0 and stats.hits == 0 and stats.fallbacks == 3, stats.to_dict()
    reason = "device_to_host_read" if r == 0 else "capture_failed_on_another_rank"
    assert dict(stats.fallbacks_by_reason) == {reason: 3}, stats.to_dict()


def check_raise_mode_raises_on_every_rank(comm: dist.Communicator) -> None:
    def reads_on_last_rank(x):
        if comm.rank == comm.size - 1:
            float(x.sum())
        return comm.all_reduce(np.ascontiguousarray(x))

    f = dist.jit(reads_on_last_rank, comm=comm, config=dict(backend="host", capture_sizes=[4],
                                                            on_capture_error="raise"))
    try:
        f(random_rows(700, 4))
    except cg.CaptureError as err:
        assert ("another rank" in str(err)) == (comm.rank != comm.size - 1), str(err)
    else:
        raise AssertionError("no CaptureError on this rank")


def check_capture_after_stays_in_step(comm: dist.Communicator) -> None:
    f = dist.jit(lambda x: comm.all_reduce(np.ascontiguousarray(x)), comm=comm,
                 config=dict(backend="host", capture_sizes=[4], capture_after=3))
    for call in range(5):
        x = random_rows(800 + call, 2 + comm.rank)
        got = f(x)
        assert got.shape == x.shape
    stats = f.stats()
    assert stats.captures == 1 and dict(stats.fallbacks_by_reason) == {"cold_key": 2}, stats.to_dict()


def check_warmup_then_replays_on_every_rank(comm: dist.Communicator) -> None:
    def scaled_sum(x):
        return x * comm.all_reduce(np.ascontiguousarray(x.sum(axis=0, keepdims=True)))

    f = dist.jit(scaled_sum, comm=comm, config=dict(backend="host", capture_sizes=[2, 4, 8]))
    assert f.warmup(random_rows(1000 + comm.rank, 8)) == 3
    for rows in (8, 4, 2):
        x = random_rows(1100 + rows + comm.rank, rows)
        total = sum(random_rows(1100 + rows + k, rows).sum(axis=0, keepdims=True) for k in range(comm.size))
        np.testing.assert_allclose(f(x), x * total, rtol=1e-12)
    stats = f.stats()
    assert stats.captures == 3 and stats.hits == 3 and stats.fallbacks == 0, stats.to_dict()


def check_mismatched_shapes_are_an_error_on_every_rank(comm: dist.Communicator) -> None:
    f = dist.jit(lambda x: x + 1, comm=comm, config=dict(backend="host", capture_sizes=[4]))
    try:
        f(np.ones((2, 3 + comm.rank)))
    except dist.DistributedError as err:
        assert "different argument shapes" in str(err)
    else:
        raise AssertionError("no DistributedError on this rank")


def check_collective_in_a_loop_body_is_refused(comm: dist.Communicator) -> None:
    def loop(x):
        count = np.zeros(1, np.int32)

        def body():
            comm.all_reduce(np.ascontiguousarray(x), out=x)
            count[...] += 1

        cg.while_loop(lambda: count < 2, body)
        return x

    f = dist.jit(loop, comm=comm, config=dict(backend="host", capture_sizes=[4], on_capture_error="raise"))
    try:
        f(random_rows(900, 4))
    except cg.CaptureError as err:
        assert "collective inside a while_loop/cond/switch body" in str(err), str(err)
    else:
        raise AssertionError("a collective in a while_loop body was captured")
    g = dist.jit(loop, comm=comm, config=dict(backend="host", capture_sizes=[4]))
    x = random_rows(901, 4)
    np.testing.assert_allclose(g(x.copy()), x * comm.size ** 2, rtol=1e-12)  # eager: the host loop runs it
    assert dict(g.stats().fallbacks_by_reason) == {"collective_in_conditional": 1}


def check_heat_example_equals_one_rank(comm: dist.Communicator) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "distributed_heat.py"
    spec = importlib.util.spec_from_file_location("distributed_heat", path)
    assert spec is not None and spec.loader is not None
    heat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heat)
    result = heat.run(comm, 16 * comm.size, 6, 3)
    if comm.rank == 0:
        assert result["worst"] == 0.0 and result["changed"] > 0, result


def check_cg_example_solves_the_system(comm: dist.Communicator) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "distributed_cg.py"
    spec = importlib.util.spec_from_file_location("distributed_cg", path)
    assert spec is not None and spec.loader is not None
    cg_example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cg_example)
    n = 32 * comm.size
    result = cg_example.solve(comm, n, 8, 1e-9, 50)
    # An independent check: the gathered solution against a dense solve of the same system.
    b = np.random.default_rng(0).standard_normal(n)
    dense = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    assert result["residual"] < 1e-8 and result["stats"]["hits"] >= 1, result
    x = comm.all_gather(np.ascontiguousarray(result["x"]))
    np.testing.assert_allclose(x, np.linalg.solve(dense, b), rtol=0, atol=1e-8)


CHECKS = [
    check_heat_example_equals_one_rank, check_cg_example_solves_the_system, check_collectives,
    check_piecewise_pieces_hold_collectives,
    check_graphed_halo_exchange, check_unequal_batches_pad_to_the_largest,
    check_failed_capture_falls_back_on_every_rank, check_raise_mode_raises_on_every_rank,
    check_capture_after_stays_in_step, check_warmup_then_replays_on_every_rank,
    check_mismatched_shapes_are_an_error_on_every_rank,
    check_collective_in_a_loop_body_is_refused,
]


def main() -> int:
    comm = dist.init(backend="host")
    for check in CHECKS:
        try:
            check(comm)
        except BaseException:
            traceback.print_exc()
            print(f"FAIL {check.__name__} on rank {comm.rank}", flush=True)
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(1)
        comm.barrier()
        print(f"PASS {check.__name__} on rank {comm.rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
