"""while_loop and cond on CUDA conditional graph nodes, on a real GPU.

Every graphed result is compared with the same function run eagerly (host loop, host branch),
on data that changes between replays so that the iteration counts differ. Needs CUDA 12.4+ and
cuda-bindings; skipped with the reason where conditional nodes are unavailable.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from repo_files import load_example

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.control_flow import loops as cf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def conditional_nodes():
    reason = cf.conditional_nodes_unavailable_reason()
    if reason is not None:
        pytest.skip(f"conditional graph nodes unavailable: {reason}")


def i32(*values):
    return cupy.asarray(np.array(values, dtype=np.int32))


def assert_same(got, want):
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))


def graphed(fn, batch_argnums=(0,), **config):
    g = cg.jit(fn, config=dict(on_capture_error="raise", **config), batch_argnums=batch_argnums)
    assert g.backend.name == "cupy"
    return g


def count_up(n):
    """x counts to n[0] in a device loop; work after the loop reads the loop's result."""
    x = cupy.zeros(1, cupy.int32)
    iters = cg.while_loop(lambda: x < n, lambda: cupy.add(x, 1, out=x))
    return x, iters, x * 2 + 1


def test_raw_stream_capture_without_jit():
    """The mechanism alone: CuPy's own capture, a while loop, replays with new data."""
    n = i32(0)
    x = cupy.zeros(1, cupy.int32)
    out = cupy.zeros(1, cupy.int32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        # eager first: compiles the kernels, so nothing is compiled or loaded mid-capture
        assert int(cg.while_loop(lambda: x < n, lambda: cupy.add(x, 1, out=x))) == 0
        stream.begin_capture()
        try:
            x.fill(0)
            iters = cg.while_loop(lambda: x < n, lambda: cupy.add(x, 1, out=x))
            cupy.multiply(x, 3, out=out)
        finally:
            graph = stream.end_capture()
    for value in (5, 0, 1, 1000, 2):
        n.fill(value)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        assert int(x[0]) == value and int(iters) == value and int(out[0]) == 3 * value


@pytest.mark.parametrize("order", [(0, 1, 1000, 7, 0), (1000, 3, 0, 1)])
def test_while_loop_iterations_follow_the_data_on_replay(order):
    g = graphed(count_up)
    for value in order:
        x, iters, after = g(i32(value))
        assert int(x[0]) == int(iters) == value and int(after[0]) == 2 * value + 1
    stats = g.stats()
    assert stats.captures == 1 and stats.fallbacks == 0 and stats.hits >= len(order) - 1


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.uint64, np.float32, np.float64, np.float16])
def test_condition_dtypes(dtype):
    def fn(n):
        x = cupy.zeros(1, cupy.float64)
        iters = cg.while_loop(lambda: (x < n).astype(dtype), lambda: cupy.add(x, 1.0, out=x))
        return x, iters

    g = graphed(fn)
    for value in (3.0, 0.0, 11.0):
        x, iters = g(cupy.asarray([value]))
        assert float(x[0]) == value and int(iters) == int(value)


def test_max_iters_stops_an_endless_loop_on_the_device():
    def fn(x):
        iters = cg.while_loop(lambda: cupy.ones((), cupy.int32), lambda: cupy.add(x, 1, out=x), max_iters=50)
        return x * 1, iters

    g = graphed(fn)
    for start in (0, 7):
        x, iters = g(i32(start))
        assert int(x[0]) == start + 50 and int(iters) == 50
    x, iters = graphed(lambda x: (x * 1, cg.while_loop(lambda: x < 10, lambda: cupy.add(x, 1, out=x),
                                                       max_iters=0)))(i32(3))
    assert int(x[0]) == 3 and int(iters) == 0


def branchy(p, x):
    out = cupy.empty_like(x)
    cg.cond(p, lambda: cupy.multiply(x, 2, out=out), lambda: cupy.add(x, 100, out=out))
    only_true = x.copy()
    cg.cond(p, lambda: cupy.negative(only_true, out=only_true))
    return out, only_true


def test_cond_takes_each_branch_by_the_data():
    rng = np.random.default_rng(5)
    g = graphed(branchy, batch_argnums=(1,))
    for flag in (1, 0, 0, 1, 1):
        x = cupy.asarray(rng.integers(-50, 50, size=(8,)).astype(np.int32))
        got = g(i32(flag), x)
        want = branchy(i32(flag), x)
        for a, b in zip(got, want):
            assert_same(a, b)
    assert g.stats().captures == 1


def collatz(n):
    """Collatz steps to 1: a cond inside a while loop; a checksum of the trajectory."""
    x = n.astype(cupy.int64)
    acc = cupy.zeros_like(x)

    def body():
        cg.cond(x % 2 == 0, lambda: cupy.floor_divide(x, 2, out=x), lambda: cupy.add(3 * x, 1, out=x))
        cupy.add(acc * 3, x, out=acc)

    steps = cg.while_loop(lambda: x != 1, body, max_iters=10_000)
    return steps, acc


def triangle(n):
    """A while loop inside a while loop: total = 0 + 1 + ... + (n - 1)."""
    i = cupy.zeros(1, cupy.int32)
    total = cupy.zeros(1, cupy.int32)

    def outer():
        j = cupy.zeros(1, cupy.int32)
        cg.while_loop(lambda: j < i, lambda: (cupy.add(j, 1, out=j), cupy.add(total, 1, out=total)))
        cupy.add(i, 1, out=i)

    outer_iters = cg.while_loop(lambda: i < n, outer)
    return total, outer_iters


def test_nesting_matches_eager():
    g_collatz, g_triangle = graphed(collatz), graphed(triangle)
    for start in (27, 1, 6, 97):
        got, want = g_collatz(cupy.asarray([start])), collatz(cupy.asarray([start]))
        assert int(got[0]) == int(want[0])
        assert_same(got[1], want[1])
    assert int(g_collatz(cupy.asarray([27]))[0]) == 111
    for n in (0, 1, 5, 40):
        total, outer = g_triangle(i32(n))
        assert int(total[0]) == n * (n - 1) // 2 and int(outer) == n


def test_eager_mode_none_and_graphed_are_equal():
    eager = cg.jit(collatz, config=dict(mode="NONE"))
    full = graphed(collatz)
    for start in (7, 31, 1):
        a, b = eager(cupy.asarray([start])), full(cupy.asarray([start]))
        assert int(a[0]) == int(b[0])
        assert_same(a[1], b[1])
    assert eager.stats().captures == 0 and full.stats().captures == 1


def test_cg_solve_graph_matches_the_host_loop():
    """Same kernels in the same order with deterministic reductions: the same iteration count and
    the same solution (checked to 1e-12 relative; expected bit for bit)."""
    example = load_example("cg_poisson")
    tol = 1e-6
    solver = example.make_solver(config=dict(on_capture_error="raise"))
    for n, seed in ((64, 0), (64, 1), (128, 2)):
        b = example.poisson_rhs(cupy, n, seed=seed)
        x, iters, rr = solver(b, tol, 10 * n)
        x_ref, iters_ref, rr_ref = example.cg_host_loop(b, tol, 10 * n)
        assert int(iters) == iters_ref and 0 < iters_ref < 10 * n
        assert float(rr) < tol * tol and abs(float(rr) - rr_ref) <= 1e-12 * max(rr_ref, 1e-300)
        np.testing.assert_allclose(cupy.asnumpy(x), cupy.asnumpy(x_ref), rtol=1e-12, atol=0)
        assert example.residual_norm(b, x) < 2 * tol
    assert solver.stats().captures == 2 and solver.stats().fallbacks == 0


def test_failed_conditional_capture_falls_back_and_the_process_stays_usable(monkeypatch):
    from cuda.bindings import runtime as rt

    def broken(*args, **kwargs):
        return (rt.cudaError_t.cudaErrorNotSupported, None)

    monkeypatch.setattr(rt, "cudaGraphAddNode", broken)
    with pytest.raises(cg.CaptureError, match="cudaGraphAddNode failed with cudaErrorNotSupported"):
        graphed(count_up)(i32(4))
    fallback = cg.jit(count_up)
    x, iters, after = fallback(i32(9))
    assert int(x[0]) == 9 and int(iters) == 9 and int(after[0]) == 19
    assert fallback.stats().fallbacks >= 1 and fallback.stats().captures == 0
    monkeypatch.undo()

    real_begin = rt.cudaStreamBeginCaptureToGraph
    calls = []

    def body_fails_once(*args):
        calls.append(1)
        if len(calls) == 1:
            return (rt.cudaError_t.cudaErrorInvalidValue,)
        return real_begin(*args)

    monkeypatch.setattr(rt, "cudaStreamBeginCaptureToGraph", body_fails_once)
    with pytest.raises(cg.CaptureError, match="cudaStreamBeginCaptureToGraph"):
        graphed(count_up)(i32(4))
    monkeypatch.undo()

    fresh = graphed(count_up)  # a fresh capture with a loop records and replays
    for value in (3, 0, 12):
        x, iters, after = fresh(i32(value))
        assert int(x[0]) == int(iters) == value and int(after[0]) == 2 * value + 1
    plain = graphed(lambda v: v * 3 + 1)
    assert_same(plain(i32(1, 2, 3)), i32(4, 7, 10))


def test_uncapturable_op_in_a_body_falls_back_in_a_process_that_survives():
    """Run in a subprocess: an op that invalidates a body capture must not take the process down."""
    code = textwrap.dedent("""
        import cupy, cupygraph as cg

        def fn(n):
            x = cupy.zeros(1, cupy.int32)
            def body():
                cupy.add(x, 1, out=x)
                cupy.cuda.get_current_stream().synchronize()  # not allowed while capturing
            return x, cg.while_loop(lambda: x < n, body)

        g = cg.jit(fn)
        x, iters = g(cupy.asarray([5], dtype=cupy.int32))
        assert int(x[0]) == 5 and int(iters) == 5, (x, iters)
        assert g.stats().captures == 0 and g.stats().fallbacks >= 1
        again = cg.jit(lambda n: cg.while_loop(lambda: n < 10, lambda: cupy.add(n, 1, out=n)))
        assert int(again(cupy.asarray([2], dtype=cupy.int32))) == 8
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr
