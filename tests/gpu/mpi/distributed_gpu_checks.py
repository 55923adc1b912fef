"""GPU checks under ``mpiexec -n 2`` (or 4: one GPU per rank, NCCL): run by tools/gpu_distributed.sh.

Each check uses fresh random data and compares with a result computed independently (NumPy on
data every rank can regenerate, or the eager NCCL call), bit for bit where the arithmetic is the
same; before a replay is compared, its static outputs and the free memory of its pool are poisoned.
A rank prints ``PASS <name>`` or ``FAIL <name>``; after each check the ranks agree on the result,
so one rank's failure leaves no other waiting. Every check is bounded: a watchdog
(``faulthandler``) prints every thread's stack and ends the rank after ``CHECK_LIMIT_S`` seconds,
and the launcher's ``timeout`` bounds the whole job.
"""

from __future__ import annotations

import faulthandler
import sys
import traceback
from pathlib import Path

import cupy
import numpy as np

import cupygraph as cg
from cupygraph import distributed as dist
from cupygraph.testing.memcheck import poison_family

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from repo_files import load_example

CHECK_LIMIT_S = 60  # not a performance bound: a hang ends the rank with its stack instead of blocking the job


def host_rows(seed: int, rows: int, cols: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def assert_sum(got, parts, what):
    """Bit for bit on two ranks (a + b either way round); on more, NCCL may add in another order."""
    want = np.sum(parts, axis=0, dtype=parts[0].dtype) if len(parts) > 2 else parts[0] + parts[1]
    if len(parts) == 2:
        assert np.array_equal(got, want), what
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def check_eager_collectives(comm):
    r, n = comm.rank, comm.size
    rows = 4 * n
    mine = cupy.asarray(host_rows(10 + r, rows))
    every = [host_rows(10 + k, rows) for k in range(n)]
    assert_sum(cupy.asnumpy(comm.all_reduce(mine)), every, "all_reduce sum")
    assert np.array_equal(cupy.asnumpy(comm.all_reduce(mine, "max")), np.maximum.reduce(every))
    assert np.array_equal(cupy.asnumpy(comm.all_gather(mine)), np.concatenate(every))
    assert_sum(cupy.asnumpy(comm.reduce_scatter(mine)), [e[4 * r: 4 * r + 4] for e in every], "reduce_scatter")
    x = cupy.asarray(host_rows(20 + r, 8))
    comm.broadcast(x, root=n - 1)
    assert np.array_equal(cupy.asnumpy(x), host_rows(20 + n - 1, 8))
    out = cupy.empty_like(mine)
    comm.sendrecv(mine, (r + 1) % n, out, (r - 1) % n)  # a ring: every rank sends and receives at once
    assert np.array_equal(cupy.asnumpy(out), every[(r - 1) % n])


def step(comm):
    def fn(x):
        y = cupy.tanh(x) * 1.5
        total = comm.all_reduce(y)
        gathered = comm.all_gather(cupy.ascontiguousarray(total[:2]))
        return total + x, gathered
    return fn


def same_bits(got, want) -> bool:
    return got.shape == want.shape and got.dtype == want.dtype and bool(
        cupy.array_equal(cupy.ascontiguousarray(got).view(cupy.uint8), cupy.ascontiguousarray(want).view(cupy.uint8)))


def poison(f) -> None:
    """Fill the static outputs of every graph of ``f`` and its pool's free memory with 0xFF bytes: a
    replay that does not write an output (an NCCL node that kept old addresses, say) shows."""
    for entry in f.registry.entries():
        for leaf in flatten_arrays(entry.cudagraph.outputs):
            leaf.view(cupy.uint8).fill(0xFF)
    poison_family(f.registry.backend)
    cupy.cuda.Device().synchronize()


def flatten_arrays(tree):
    if isinstance(tree, cupy.ndarray):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in flatten_arrays(item)]
    return []


def check_graph_replay_equals_eager(comm, mode="FULL"):
    fn = step(comm)
    f = dist.jit(fn, comm=comm, config=dict(mode=mode, capture_sizes=[8, 16]))
    for call in range(4):
        x = cupy.asarray(host_rows(100 + call + 17 * comm.rank, 16))
        want = fn(x)
        poison(f)
        got = f(x)
        for a, b in zip(got, want):
            assert same_bits(a, b), f"call {call}: replay differs from eager"
    s = f.stats()
    assert s.captures == 1 and s.hits == 3 and s.fallbacks == 0, s.to_dict()
    if comm.backend_name == "cupy":
        # NCCL keeps the buffers' addresses where re-pointing kernel nodes cannot reach: nothing is bound,
        # and the audit counts NCCL's own memory as held with the communicator, not as foreign.
        assert not any(s.rebinds_by_argument.values()), s.to_dict()  # labels are listed with 0
        (entry,) = f.registry.entries()
        audit = getattr(entry.cudagraph, "audit", None)
        assert audit is None or not audit.foreign(), [r.describe() for r in audit.foreign()]


def check_heat_graph_equals_eager(comm):
    """Halo rows by NCCL send/recv inside the graph: every rank's slab bit for bit as the eager steps."""
    heat = load_example("distributed_heat")
    slab = heat.Slab(comm, 512, cupy)
    coef = cupy.full((1,), 0.2, dtype=cupy.float32)
    graphed = heat.make_step(slab, 6, graphs=True, backend=comm.backend_name)
    eager = heat.make_step(slab, 6, graphs=False, backend=comm.backend_name)
    u = slab.initial()
    u = u + cupy.asarray(np.random.default_rng(900 + comm.rank).random(u.shape, dtype=np.float32)) * 1e-3
    for call in range(3):
        want = eager(coef, u)
        given = u.copy()  # view outputs: the previous output is about to be poisoned
        poison(graphed)
        got = graphed(coef, given)
        assert same_bits(got, want), f"call {call}: graphed halo exchange differs from eager on rank {comm.rank}"
        u = want
    s = graphed.stats()
    assert s.captures == 1 and s.hits == 2 and s.fallbacks == 0, s.to_dict()


def check_piecewise_pieces(comm):
    @cg.graph_break
    def host_side(x):
        return x * 1  # a break: runs eagerly between the pieces

    def fn(x):
        a = comm.all_reduce(x * 2)
        b = host_side(a)
        return comm.all_reduce(b + 1)

    f = dist.jit(fn, comm=comm, config=dict(mode="PIECEWISE", capture_sizes=[8]))
    for call in range(3):
        x = cupy.asarray(host_rows(200 + call + 5 * comm.rank, 8))
        assert bool((f(x) == fn(x)).all())
    s = f.stats()
    # The call that captured ran fn as it is; the other two replayed.
    assert s.captures == 1 and dict(s.replays_by_mode).get("PIECEWISE", 0) == 2, s.to_dict()


def check_lockstep_padding(comm):
    def fn(x):
        return x * comm.all_reduce(cupy.ascontiguousarray(x.sum(axis=0, keepdims=True)))

    sizes = [4, 8, 16]
    f = dist.jit(fn, comm=comm, config=dict(capture_sizes=sizes))
    rows = [3 + 2 * k for k in range(comm.size)]  # every rank pads to the last rank's rows
    for call in range(3):
        x_host = host_rows(300 + call + comm.rank, rows[comm.rank])
        got = cupy.asnumpy(f(cupy.asarray(x_host)))
        partials = [cupy.asnumpy(cupy.asarray(host_rows(300 + call + k, rows[k])).sum(axis=0, keepdims=True))
                    for k in range(comm.size)]
        total = sum(partials)
        assert got.shape == x_host.shape
        # float32 sums in NCCL's order: a column whose partial sums cancel is exact only to the size of
        # its terms, not of its result.
        scale = np.abs(x_host) * sum(np.abs(p) for p in partials)
        np.testing.assert_allclose(got, x_host * total, rtol=1e-5, atol=float((1e-5 * scale).max()))
    held = [e.key.descriptor.num_tokens for e in f.registry.entries()]
    assert held == [min(c for c in sizes if c >= rows[-1])], held  # one key, the same on every rank


def check_fallback_together(comm):
    def fn(x):
        y = comm.all_reduce(x)
        if comm.rank == 0:
            float(y.sum())  # a device-to-host read: this rank's capture fails
        return y * 2

    f = dist.jit(fn, comm=comm, config=dict(capture_sizes=[8]))
    for call in range(3):
        x = cupy.asarray(host_rows(400 + call + 3 * comm.rank, 8))
        want = 2 * sum(host_rows(400 + call + 3 * k, 8) for k in range(comm.size))
        np.testing.assert_allclose(cupy.asnumpy(f(x)), want, rtol=1e-5, atol=1e-6)
    s = f.stats()
    reasons = dict(s.fallbacks_by_reason)
    assert f.registry.num_graphs() == 0 and list(reasons.values()) == [3], s.to_dict()
    # Rank 0 keeps its own reason (the host read); the others fall back because rank 0 failed.
    assert (next(iter(reasons)) == "capture_failed_on_another_rank") == (comm.rank != 0), s.to_dict()
    # NCCL still works together afterwards, eagerly and in a new graph.
    check_graph_replay_equals_eager(comm)


def check_raise_mode_on_every_rank(comm):
    def fn(x):
        y = comm.all_reduce(x)
        if comm.rank == comm.size - 1:
            float(y.sum())  # this rank's capture fails (after the collective: the warm-ups stay in step)
        return y

    f = dist.jit(fn, comm=comm, config=dict(capture_sizes=[8], on_capture_error="raise"))
    try:
        f(cupy.asarray(host_rows(450 + comm.rank, 8)))
    except cg.CaptureError as err:
        assert ("another rank" in str(err)) == (comm.rank != comm.size - 1), str(err)
    else:
        raise AssertionError(f"no CaptureError on rank {comm.rank}")
    # Every rank is still in step: an eager collective gives the sum of every rank's rows.
    got = cupy.asnumpy(comm.all_reduce(cupy.asarray(host_rows(460 + comm.rank, 8))))
    np.testing.assert_allclose(got, sum(host_rows(460 + k, 8) for k in range(comm.size)), rtol=1e-5)


def check_collective_in_loop_refused(comm):
    def fn(x):
        count = cupy.zeros(1, cupy.int32)

        def body():
            comm.all_reduce(x, out=x)
            count[...] += 1

        cg.while_loop(lambda: count < 2, body)
        return x

    f = dist.jit(fn, comm=comm, config=dict(capture_sizes=[8]))
    x = cupy.asarray(host_rows(500, 8))
    got = cupy.asnumpy(f(x.copy()))
    np.testing.assert_allclose(got, cupy.asnumpy(x) * comm.size ** 2, rtol=1e-6)  # every rank holds x, twice
    assert dict(f.stats().fallbacks_by_reason) == {"collective_in_conditional": 1}, f.stats().to_dict()


def check_heat_equals_one_gpu(comm):
    result = load_example("distributed_heat").run(comm, 1024, 10, 3)
    if comm.rank == 0:
        assert result["worst"] == 0.0 and result["changed"] > 0, result


def check_cg_converges(comm):
    result = load_example("distributed_cg").solve(comm, 4096, 32, 1e-9, 400)
    assert result["residual"] < 1e-5 and result["stats"]["hits"] >= 1 and result["stats"]["fallbacks"] == 0, result


CHECKS = [check_eager_collectives, check_graph_replay_equals_eager, check_piecewise_pieces, check_lockstep_padding,
          check_heat_graph_equals_eager, check_fallback_together, check_raise_mode_on_every_rank,
          check_heat_equals_one_gpu, check_cg_converges, check_collective_in_loop_refused]


def main() -> int:
    comm = dist.init(backend="cupy")
    if comm.size < 2:
        print("FAIL: 1 rank (the launcher and mpi4py's MPI differ?); these checks need 2 or more", flush=True)
        return 1
    print(f"rank {comm.rank}: device {comm.device}, {cupy.cuda.runtime.getDeviceProperties(comm.device)['name']}",
          flush=True)
    failed = 0
    for check in CHECKS:
        faulthandler.dump_traceback_later(CHECK_LIMIT_S, exit=True)
        try:
            check(comm)
            cupy.cuda.Device().synchronize()
            ok = True
        except BaseException:
            traceback.print_exc()
            ok = False
        # Every rank learns every result, so one failure does not leave the other waiting.
        all_ok = comm.agree_all(ok)
        faulthandler.cancel_dump_traceback_later()
        print(f"{'PASS' if ok else 'FAIL'} {check.__name__} on rank {comm.rank}", flush=True)
        failed += not all_ok
    print(f"rank {comm.rank}: {len(CHECKS) - failed} of {len(CHECKS)} checks passed on every rank", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
