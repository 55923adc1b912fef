"""cupygraph.matmul / cupygraph.linalg on cuBLAS inside FULL graphs, on a real GPU (issue 13).

Replays are compared bit for bit with eager cupygraph calls at the captured (padded) shape, since
cuBLAS may choose another algorithm for another row count; against cupy.matmul at the real shape
they agree within the dtype's tolerance. Inputs are fresh random data, outputs poisoned with NaN
before each call. Each test runs under each installed binding (ctypes, nvmath) in a fresh thread,
so that thread's cuBLAS handle comes from that binding.
"""

from __future__ import annotations

import gc
import importlib.util
import threading

import numpy as np
import pytest
from extras import needs_nvmath
from replay_helpers import replayed, run_threads
from repo_files import load_example

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.pytree import flatten  # noqa: E402

DTYPES = [np.float16, np.float32, np.float64, np.complex64, np.complex128]
TOL = {"e": 2e-2, "f": 2e-4, "d": 1e-10, "F": 2e-4, "D": 1e-10}
MAX = 64
FULL = {"mode": "FULL", "max_capture_size": MAX}


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return cupy.asarray(x.astype(dtype))


def layout(x, kind):
    if kind == "F":
        return cupy.asfortranarray(x)
    if kind == "T":
        return cupy.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    if kind == "padded":
        wide = cupy.zeros((*x.shape[:-1], x.shape[-1] + 5), dtype=x.dtype)
        wide[..., : x.shape[-1]] = x
        return wide[..., : x.shape[-1]]
    return cupy.ascontiguousarray(x)


def padded_size(n):
    return min(s for s in cg.default_capture_sizes(MAX) if s >= n)


def poison(graphed):
    for entry in graphed.registry.entries():
        for leaf in flatten(entry.cudagraph.outputs, lambda v: isinstance(v, cupy.ndarray))[0]:
            if leaf.dtype.kind in "fc":
                leaf.fill(np.nan)


def run_in_thread(fn, *args):
    """``fn(*args)`` in a new thread (a new cuBLAS handle, from the binding the environment names)."""
    result = {}

    def target():
        try:
            result["value"] = fn(*args)
        except BaseException as err:  # handed back to the test's thread
            result["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


def random_case(rng):
    """(function, constant arguments, batched input's trailing shape, dtype, reference) of one random product."""
    dtype = DTYPES[rng.integers(len(DTYPES))]
    m, k, p = (int(v) for v in rng.integers(1, 48, size=3))
    kind = ["2d", "batched", "broadcast", "vector", "gemm", "views"][rng.integers(6)]
    w_layout = ["C", "F", "T", "padded"][rng.integers(4)]
    if kind == "2d":
        w = layout(rand(rng, (k, p), dtype), w_layout)
        return (lambda x, w: cg.matmul(x, w)), (w,), (k,), dtype, (lambda x, w: cupy.matmul(x, w))
    if kind == "batched":
        w = layout(rand(rng, (k, p), dtype), w_layout)
        return (lambda x, w: cg.matmul(x, w)), (w,), (m, k), dtype, (lambda x, w: cupy.matmul(x, w))
    if kind == "broadcast":
        w = layout(rand(rng, (1, k, p), dtype), w_layout)
        return (lambda x, w: cg.matmul(x.swapaxes(-1, -2), w)), (w,), (k, m), dtype, \
            (lambda x, w: cupy.matmul(x.swapaxes(-1, -2), w))
    if kind == "vector":
        v = rand(rng, (k,), dtype)
        return (lambda x, v: cg.matmul(x, v)), (v,), (k,), dtype, (lambda x, v: cupy.matmul(x, v))
    if kind == "gemm":
        w, bias = layout(rand(rng, (p, k), dtype), w_layout), rand(rng, (p,), dtype)
        return ((lambda x, w, b: cg.linalg.gemm(x, w, b, alpha=0.5, beta=2.0, trans_b=True)), (w, bias), (k,), dtype,
                (lambda x, w, b: 0.5 * cupy.matmul(x, w.T) + 2.0 * b))
    w = layout(rand(rng, (k, p), dtype), w_layout)

    def views(x, w):  # a strided operand (copied first) and an F-ordered output view
        out = cupy.empty((p, x.shape[0]), dtype=x.dtype).T
        return cg.matmul(x[:, ::2], w, out=out)

    return views, (w,), (2 * k,), dtype, (lambda x, w: cupy.matmul(x[:, ::2], w))


def check_random_cases(seed, cases):
    rng = np.random.default_rng(seed)
    for _ in range(cases):
        fn, consts, tail, dtype, reference = random_case(rng)
        graphed = cg.jit(fn, constant_argnums=tuple(range(1, 1 + len(consts))), config=FULL)
        for n in [*rng.integers(1, MAX + 1, size=4).tolist(), 3, 3]:  # 3 twice: a replay of a captured key
            x = rand(rng, (n, *tail), dtype)
            poison(graphed)
            got, replay = replayed(graphed, x, *consts)
            npad = padded_size(n) if replay else n
            x_pad = cupy.zeros((npad, *tail), dtype=dtype)
            x_pad[:n] = x
            eager = fn(x_pad, *consts)[:n]  # the shape that ran, eagerly: the same cuBLAS algorithm
            np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(eager))
            high = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
            want = cupy.asnumpy(reference(x.astype(high), *[c.astype(high) for c in consts]))
            tol = TOL[np.dtype(dtype).char] * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(cupy.asnumpy(got).astype(want.dtype), want, rtol=TOL[np.dtype(dtype).char],
                                       atol=tol)
        stats = graphed.stats()
        assert stats.fallbacks == 0, stats.last_detail_by_reason
        assert stats.hits >= 1
        for entry in graphed.registry.entries():
            audit = entry.cudagraph.audit
            for ref in [] if audit is None else audit.foreign():
                # cuBLAS's nodes (and the pointer table's) touch only memory the graph owns or holds.
                # CuPy's own kernels are left out: their CIndexer parameter carries uninitialised
                # scratch words (index_) that can look like addresses of someone else's memory.
                assert all(node.startswith("kernel 'cupy_") for node in ref.nodes), ref.describe()


def test_matmul_replays_equal_eager_bit_for_bit_over_random_cases(binding):
    def check():
        assert cg.linalg.binding_info()["binding"] == binding
        check_random_cases(13 if binding == "ctypes" else 14, 24)

    run_in_thread(check)


def test_device_pointer_scalars_change_between_replays(binding):
    def check():
        rng = np.random.default_rng(2)
        for dtype in DTYPES:
            w, c = rand(rng, (8, 8), dtype), rand(rng, (8,), dtype)
            alpha, beta = cg.linalg.scalar(1.0, like=w), cg.linalg.scalar(0.0, like=w)
            graphed = cg.jit(lambda x, w, c, a, b: cg.linalg.gemm(x, w, c, alpha=a, beta=b),
                             constant_argnums=(1, 2, 3, 4), config=FULL)
            x = rand(rng, (5, 8), dtype)
            base = cupy.asnumpy(graphed(x, w, c, alpha, beta))
            alpha[...] = -2.0
            beta[...] = 3.0
            changed = cupy.asnumpy(graphed(x, w, c, alpha, beta))
            want = -2.0 * base.astype(np.complex128) + 3.0 * cupy.asnumpy(c).astype(np.complex128)
            tol = TOL[np.dtype(dtype).char] * 10
            np.testing.assert_allclose(changed.astype(np.complex128), want, rtol=tol, atol=tol)
            assert graphed.stats().hits >= 1 and graphed.registry.num_graphs() == 1

    run_in_thread(check)


def test_strided_and_pointer_array_batches_capture(binding):
    def check():
        rng = np.random.default_rng(3)
        w = rand(rng, (6, 5), np.float32)

        def listed(x, w):
            return cg.linalg.gemm_batched([x[i] for i in range(x.shape[0])], [w] * x.shape[0], alpha=2.0)

        def strided(x, w):
            return cg.linalg.gemm_strided_batched(x, w[None], alpha=2.0)

        for fn in (listed, strided):
            graphed = cg.jit(fn, constant_argnums=1, config={"mode": "FULL", "max_capture_size": 40})
            for n in (3, 40, 17):
                x = rand(rng, (n, 4, 6), np.float32)
                poison(graphed)
                got, replay = replayed(graphed, x, w)
                got = cupy.asnumpy(got)
                npad = min(s for s in cg.default_capture_sizes(40) if s >= n) if replay else n
                x_pad = cupy.zeros((npad, 4, 6), np.float32)
                x_pad[:n] = x
                np.testing.assert_array_equal(got, cupy.asnumpy(fn(x_pad, w))[:n])
                np.testing.assert_allclose(got, 2 * cupy.asnumpy(x) @ cupy.asnumpy(w), rtol=1e-4, atol=1e-4)
            assert graphed.stats().fallbacks == 0

    run_in_thread(check)


def test_threads_gemms_on_the_null_stream_at_once_are_each_right():
    """Four threads' eager GEMMs on the one null stream, at once: each thread's cuBLAS workspace is its own.
    A GEMM is several kernels (split-K partial sums in the workspace, then a reduction); with one
    workspace for the stream, two threads' launches interleaved and a reduction read the other thread's
    sums (an H200 gave another thread's product, off by ~50). A long k makes split-K likely."""
    gc.collect()
    cg.linalg.release_unused()  # no workspace made earlier in the main thread: the threads make theirs

    def worker(seed):
        rng = np.random.default_rng(100 + seed)
        for i in range(20):
            m, k, n = int(rng.integers(1, 65)), int(rng.choice([32, 512, 4096])), int(rng.integers(1, 33))
            a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
            want = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
            got = cupy.asnumpy(cg.matmul(a, b))
            err = np.abs(got - want).max()
            assert err <= 1e-4 * k, f"thread {seed}, GEMM {i} ({m}x{k}x{n}): max |got - want| {err:.3g}"

    errors = run_threads(worker, 4)
    assert not errors, "\n".join(str(err) for err in errors)


def test_threads_capture_and_replay_at_once_on_their_own_handles():
    errors: list[BaseException] = []
    start, first_done = threading.Barrier(4), threading.Barrier(4)
    gc.collect()
    before = cg.linalg.release_unused()["handles"]  # this thread's handle, if it made one
    seen: list[int] = []

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            w = rand(rng, (32, 16), np.float32)
            graphed = cg.jit(lambda x, w: cg.matmul(x, w) * 2, constant_argnums=1, config=FULL)
            start.wait()
            earlier: list = []  # the last calls' inputs: a replay that read one of them shows
            for i, n in enumerate(rng.integers(1, MAX + 1, size=25).tolist()):
                x = rand(rng, (n, 32), np.float32)
                got, replay = replayed(graphed, x, w)
                if i == 0:  # every thread has made its handle by now, and holds it
                    first_done.wait()
                    seen.append(cg.linalg.resources()["handles"])
                x_pad = cupy.zeros((padded_size(n) if replay else n, 32), np.float32)
                x_pad[:n] = x
                want = cupy.asnumpy((cg.matmul(x_pad, w) * 2)[:n])
                host = cupy.asnumpy(got)
                if not np.array_equal(host, want):  # say enough to tell a race from a rounding
                    other = cupy.zeros((n if replay else padded_size(n), 32), np.float32)
                    other[:n] = x
                    other_want = cupy.asnumpy((cg.matmul(other, w) * 2)[:n])
                    bad_rows = np.flatnonzero((host != want).any(axis=1)).tolist()
                    stale = [j for j, old in earlier if old.shape[0] >= n and np.allclose(
                        host, cupy.asnumpy(cg.matmul(old[:n], w) * 2), rtol=1e-4, atol=1e-4)]
                    raise AssertionError(
                        f"thread {seed}, call {i}: {n} rows, replayed={replay}, rows {bad_rows} differ, "
                        f"max |got - want| {np.abs(host - want).max():.3g} (|want| up to {np.abs(want).max():.3g}); "
                        f"got equals the product at {other.shape[0]} rows: {np.array_equal(host, other_want)}; "
                        f"got is the product of earlier calls' inputs {stale}; stats {graphed.stats().to_dict()}")
                earlier = [*earlier[-3:], (i, x)]
            assert graphed.stats().fallbacks == 0
        except BaseException as err:
            errors.append(err)
            start.abort()
            first_done.abort()

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(str(err) for err in errors)
    assert min(seen) >= before + 4  # one handle per thread, all alive at once


def test_workspace_and_handles_are_released_with_the_graphs(binding):
    gc.collect()
    base = cg.linalg.release_unused()

    def capture():
        rng = np.random.default_rng(5)
        w = rand(rng, (16, 16), np.float32)
        graphed = cg.jit(lambda x, w: cg.matmul(x, w), constant_argnums=1, config=FULL)
        with cupy.cuda.Stream(non_blocking=True):  # a stream of this thread's own, gone when it ends
            for n in (4, 4, 9):
                graphed(rand(rng, (n, 16), np.float32), w)
            return graphed, w, cg.linalg.resources()

    graphed, w, during = run_in_thread(capture)
    assert during["handles"] == base["handles"] + 1
    # The graphs' workspace (the capture stream's), and the one of the thread's stream, where the calls
    # that captured ran the function as it is (a plain call's cg.matmul uses one there too).
    assert during["workspaces"] == base["workspaces"] + 2 and during["workspace_bytes"] > base["workspace_bytes"]
    held = cg.linalg.release_unused()  # the thread is gone, its graphs still hold handle and workspace
    assert held["handles"] == base["handles"] + 1 and held["workspaces"] == base["workspaces"] + 1
    x = rand(np.random.default_rng(6), (4, 16), np.float32)  # replays on the ended thread's handle
    np.testing.assert_allclose(cupy.asnumpy(graphed(x, w)), cupy.asnumpy(x) @ cupy.asnumpy(w), rtol=1e-4, atol=1e-4)
    assert graphed.stats().hits >= 2
    graphed.clear()
    del graphed
    gc.collect()
    assert cg.linalg.release_unused() == base


def test_manual_capture_needs_a_prepared_stream():
    rng = np.random.default_rng(7)
    a, b = rand(rng, (20, 30), np.float32), rand(rng, (30, 10), np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        cg.linalg.prepare()
        out = cupy.empty((20, 10), np.float32)
        stream.begin_capture()
        cg.matmul(a, b, out=out)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(cg.matmul(a, b)))
    fresh = cupy.cuda.Stream(non_blocking=True)
    with fresh:
        fresh.begin_capture()
        try:
            with pytest.raises(cg.CaptureError, match=r"no cuBLAS workspace .*linalg\.prepare\(\)"):
                cg.matmul(a, b)
        finally:
            fresh.end_capture()


def test_cupy_matmul_fallback_names_the_capturable_replacement():
    rng = np.random.default_rng(8)
    w = rand(rng, (8, 8), np.float32)
    # With routing off (on by default since issue 29, which captures x @ w unchanged: test_routes_gpu.py)
    graphed = cg.jit(lambda x, w: x @ w, constant_argnums=1, config={**FULL, "route_library_calls": False})
    graphed(rand(rng, (4, 8), np.float32), w)
    detail = graphed.stats().detail("library_call")
    assert "cupygraph.matmul" in detail and "cuBLAS" in detail, detail


def test_binding_enums_match_nvmath():
    needs_nvmath("the nvmath cuBLAS binding")
    from cupygraph.linalg import _binding

    cublas = importlib.import_module("nvmath.bindings.cublas")  # from the GPU extras

    assert (_binding.OP_N, _binding.OP_T) == (cublas.Operation.N, cublas.Operation.T)
    assert _binding.POINTER_MODE_DEVICE == cublas.PointerMode.DEVICE
    assert _binding.COMPUTE_TYPE["f"] == cublas.ComputeType.COMPUTE_32F
    assert _binding.COMPUTE_TYPE["d"] == cublas.ComputeType.COMPUTE_64F
    assert _binding.GEMM_DEFAULT == cublas.GemmAlgo.DEFAULT


def test_mlp_example_runs_as_full_graphs():

    module = load_example("mlp_full")
    result = module.main(["--calls", "40", "--max-batch", "64", "--backend", "cupy"])
    # Eager runs the GEMMs at the real batch size, the graph at the padded one: equal up to rounding.
    assert result["fallbacks"] == 0 and result["graphs"] >= 3 and result["worst"] < 1e-4


def test_cusolver_and_cusparse_handles_of_an_ended_thread_are_destroyed():
    """A thread's cuSOLVER and cuSPARSE handles go once the thread ended and nothing holds them
    (they were kept for the process's life before); the library keeps working afterwards."""
    needs_nvmath()
    import cupyx.scipy.sparse

    from cupygraph.linalg import _retire

    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(5)
    a = cupy.asarray(rng.standard_normal((8, 8)) + 8 * np.eye(8))
    b = cupy.asarray(rng.standard_normal((8, 3)))
    sparse = cupyx.scipy.sparse.random(8, 8, density=0.3, format="csr", dtype=np.float64, random_state=1)

    def work(_: int) -> None:
        cg.linalg.solve(a, b)
        cg.linalg.spmm(sparse, b)
        cupy.cuda.get_current_stream().synchronize()

    _retire.destroy_retired()
    errors = run_threads(work, 1)  # the thread's own failure, not a count of 0 handles below
    assert not errors, "\n".join(str(err) for err in errors)
    gc.collect()
    assert _retire.pending() >= 2  # the thread's cuSOLVER and cuSPARSE handles, queued
    assert _retire.destroy_retired() >= 2 and _retire.pending() == 0
    np.testing.assert_allclose(cupy.asnumpy(cg.linalg.solve(a, b)), np.linalg.solve(cupy.asnumpy(a), cupy.asnumpy(b)),
                               rtol=1e-10)
