"""PIECEWISE graphs, mixed modes, adaptive capture and multi-stream dispatch on a real GPU."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import replayed  # noqa: E402

from cupygraph.kernels import get_kernel  # noqa: E402


def kernels(count: int):
    affine = get_kernel("elementwise.cu", "affine")
    squash = get_kernel("elementwise.cu", "squash")

    def run(x):
        n = x.size
        grid = (min(1024, (n + 255) // 256),)
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        src = x
        for i in range(count // 2):
            affine(grid, (256,), (src, a, np.int64(n), np.float32(1.0 + 0.01 * i), np.float32(0.05)))
            squash(grid, (256,), (a, b, np.int64(n)))
            src = b
        return src

    return run


def make_pipeline(with_break: bool = True):
    head, tail = kernels(50), kernels(50)
    matmul = cg.graph_break(cupy.matmul) if with_break else cupy.matmul

    def pipeline(x, w):
        return tail(matmul(head(x), w))

    return pipeline


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


def padded(x, rows):
    out = cupy.zeros((rows, *x.shape[1:]), x.dtype)
    out[: x.shape[0]] = x
    return out


def test_piecewise_replay_equals_eager_bit_for_bit():
    rng = np.random.default_rng(0)
    fn = make_pipeline()
    w = rand(rng, 64, 64) / 8
    config = cg.CUDAGraphConfig(mode="PIECEWISE", max_capture_size=64)
    graphed = cg.jit(fn, config=config, constant_argnums=(1,))
    sizes = rng.integers(1, 65, size=40).tolist()
    for n in sizes:
        x = rand(rng, n, 64)
        got, replay = replayed(graphed, x, w)
        # A replay: bit for bit against eager on the same padded batch (cuBLAS may pick another algorithm
        # for another row count); a call that ran fn as it is (capture, first padded call): against fn
        # itself. Either is close to eager on the unpadded batch.
        want = fn(padded(x, config.get_padded_batch_size(n)), w)[:n] if replay else fn(x, w)
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))
        np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(fn(x, w)), rtol=1e-5, atol=1e-6)
    stats = graphed.stats()
    assert stats.fallbacks == 0
    assert stats.captures_by_mode["PIECEWISE"] == graphed.registry.num_graphs()
    entry = graphed.registry.entries()[0]
    assert entry.cudagraph.num_pieces == 2


def test_without_break_falls_back_with_cublas_reason_and_full_mode_falls_back_with_break():
    rng = np.random.default_rng(1)
    w = rand(rng, 32, 32)
    x = rand(rng, 8, 32)
    # (cupy.matmul is routed by default since issue 29; unrouted, it is the cuBLAS refusal this test is about)
    no_break = cg.jit(make_pipeline(with_break=False), constant_argnums=(1,),
                      config=dict(mode="PIECEWISE", max_capture_size=16, route_library_calls=False))
    no_break(x, w)
    assert "cuBLAS" in no_break.stats().detail("library_call")
    full = cg.jit(make_pipeline(), config=dict(mode="FULL", max_capture_size=16, route_library_calls=False),
                  constant_argnums=(1,))
    np.testing.assert_allclose(cupy.asnumpy(full(x, w)), cupy.asnumpy(make_pipeline()(x, w)), rtol=1e-6)
    assert "cuBLAS" in full.stats().detail("library_call")
    piecewise = cg.jit(make_pipeline(), config=dict(mode="PIECEWISE", max_capture_size=16), constant_argnums=(1,))
    for _ in range(3):  # the call that captures runs the pipeline as it is; two replays
        piecewise(x, w)
    assert piecewise.stats().replays_by_mode["PIECEWISE"] == 2 and piecewise.stats().fallbacks == 0


def test_eager_op_returning_fresh_arrays_feeds_later_pieces_current_values():
    rng = np.random.default_rng(2)
    first, second = kernels(6), kernels(6)

    @cg.graph_break
    def fresh_op(y):
        return cupy.ascontiguousarray(y[:, ::-1]) * 2.0  # a new array every call

    def fn(x):
        return second(fresh_op(first(x)))

    graphed = cg.jit(fn, config=dict(mode="PIECEWISE", capture_sizes=[16]))
    for _ in range(5):
        x = rand(rng, 16, 40)
        np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(fn(x)))
    assert graphed.stats().hits == 4


def test_full_and_piecewise_dispatch_by_uniform_decode():
    rng = np.random.default_rng(3)
    head, tail = kernels(4), kernels(4)
    scale = cg.graph_break(lambda y: y * 3.0)

    def fn(x, decode):
        return tail(scale(head(x)))

    graphed = cg.jit(
        fn, config=dict(mode="FULL_AND_PIECEWISE", max_capture_size=32, max_num_reqs=32),
        descriptor_fn=lambda x, decode: cg.BatchDescriptor(x.shape[0], num_reqs=x.shape[0], uniform_decode=decode),
    )
    for n, decode in [(4, True), (4, False), (9, True), (9, False), (4, True), (9, False)]:
        x = rand(rng, n, 16)
        np.testing.assert_array_equal(cupy.asnumpy(graphed(x, decode)), cupy.asnumpy(fn(x, decode)))
    stats = graphed.stats()
    # The calls that captured (two keys per mode) ran fn as it is; the last two calls replayed.
    assert stats.replays_by_mode["FULL"] == 1 and stats.replays_by_mode["PIECEWISE"] == 1
    assert stats.captures_by_mode == {"FULL": 2, "PIECEWISE": 2}


def test_adaptive_capture_after_and_hot_shapes_survive_pressure():
    rng = np.random.default_rng(4)
    fn = kernels(4)
    graphed = cg.jit(fn, config=dict(max_capture_size=64, capture_after=3, max_cached_graphs=2,
                                     min_replays_to_keep=3, eviction="lfu"))
    x8 = rand(rng, 8, 16)
    graphed(x8), graphed(x8)
    assert graphed.registry.num_graphs() == 0  # seen twice: never captured
    for _ in range(6):
        np.testing.assert_array_equal(cupy.asnumpy(graphed(x8)), cupy.asnumpy(fn(x8)))
    for n in (16, 24, 32, 40, 48):  # cold shapes, each hot enough to capture, compete for the other slot
        x = rand(rng, n, 16)
        for _ in range(3):
            np.testing.assert_array_equal(cupy.asnumpy(graphed(x)), cupy.asnumpy(fn(x)))
    held = {e.key.descriptor.num_tokens for e in graphed.registry.entries()}
    assert 8 in held and len(held) == 2


def test_stream_dispatcher_overlaps_independent_work():
    rng = np.random.default_rng(5)
    fn = kernels(40)
    x1, x2 = rand(rng, 1, 1 << 14), rand(rng, 1, 1 << 14)  # latency-bound: room to overlap
    single = cg.StreamDispatcher(fn, num_streams=1, config=dict(capture_sizes=[1]))
    double = cg.StreamDispatcher(fn, num_streams=2, config=dict(capture_sizes=[1]))
    for d in (single, double):
        for _ in range(3):
            d.run_batch([(x1,), (x2,)])
    cupy.cuda.Device().synchronize()

    def gpu_time(dispatcher) -> float:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(10):
            out = dispatcher.run_batch([(x1,), (x2,)])
        end.record()
        end.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(out[0]), cupy.asnumpy(fn(x1)))
        np.testing.assert_array_equal(cupy.asnumpy(out[1]), cupy.asnumpy(fn(x2)))
        return cupy.cuda.get_elapsed_time(start, end)

    times = {"one stream": [], "two streams": []}
    for _ in range(3):
        times["one stream"].append(gpu_time(single))
        times["two streams"].append(gpu_time(double))
    assert min(times["two streams"]) < min(times["one stream"]), times
