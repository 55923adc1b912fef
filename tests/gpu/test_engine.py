"""The CuPy stream-capture engine on a real GPU: replay equals eager, failures are clean.

Every comparison uses fresh random data (never zeros) and is bit for bit: the kernels are
deterministic and a replay runs the same kernels on the same values.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
cublas = pytest.importorskip("cupy.cublas", reason="needs CuPy's cupy.cublas")  # an unrouted level-1 BLAS call

from replay_helpers import assert_same_array, poison_outputs  # noqa: E402

from cupygraph.kernels import get_kernel  # noqa: E402
from cupygraph.pytree import flatten  # noqa: E402


def affine_chain(length: int = 20):
    """``length`` RawKernel launches of y = a*x + b then y/(1+|y|), on a fresh buffer each step."""
    affine = get_kernel("elementwise.cu", "affine")
    squash = get_kernel("elementwise.cu", "squash")

    def run(x):
        n = x.size
        blocks = (min(1024, (n + 255) // 256),)
        y = cupy.empty_like(x)
        z = cupy.empty_like(x)
        src = x
        for i in range(length):
            affine(blocks, (256,), (src, y, np.int64(n), np.float32(1.0 + 0.01 * i), np.float32(0.1)))
            squash(blocks, (256,), (y, z, np.int64(n)))
            src = z
        return z.copy()

    return run


def rand(rng, *shape, dtype=np.float32):
    return cupy.asarray(rng.standard_normal(shape).astype(dtype))


def test_backend_is_cupy_and_replays_bit_for_bit_across_padding():
    rng = np.random.default_rng(1)
    fn = affine_chain()
    graphed = cg.jit(fn, config=dict(max_capture_size=64))
    assert graphed.backend.name == "cupy"
    sizes = [*rng.integers(1, 65, size=60).tolist(), 1, 2, 3, 4, 5, 8, 9, 63, 64]
    rng.shuffle(sizes)
    for n in sizes:
        x = rand(rng, n, 37)
        poison_outputs(graphed, cupy)
        assert_same_array(graphed(x), fn(x))
    stats = graphed.stats()
    assert stats.captures == graphed.registry.num_graphs() > 5
    assert stats.hits + stats.misses == len(sizes)
    assert stats.fallbacks == 0


def test_multiple_inputs_outputs_constants_and_statics():
    rng = np.random.default_rng(2)

    def fn(x, y, w, scale):
        h = cupy.tanh(x * w[None, :]) + y * scale
        return {"h": h, "sum": h.sum(axis=1), "w2": w * 2}

    graphed = cg.jit(fn, config=dict(max_capture_size=32), batch_argnums=(0, 1), constant_argnums=(2,))
    w = rand(rng, 16)
    for n in [3, 17, 3, 32, 1]:
        x, y = rand(rng, n, 16), rand(rng, n, 16)
        poison_outputs(graphed, cupy)
        got, want = graphed(x, y, w, 0.5), fn(x, y, w, 0.5)
        for k in want:
            assert_same_array(got[k], want[k])
    # A new constant array is a new key: the result follows the new weights.
    w_new = rand(rng, 16)
    x, y = rand(rng, 3, 16), rand(rng, 3, 16)
    assert_same_array(graphed(x, y, w_new, 0.5)["h"], fn(x, y, w_new, 0.5)["h"])
    # A new static value is a new key as well.
    assert_same_array(graphed(x, y, w_new, 2.0)["h"], fn(x, y, w_new, 2.0)["h"])


def test_view_mode_returns_views_overwritten_by_next_call_and_copy_mode_does_not():
    rng = np.random.default_rng(3)
    fn = lambda x: x * 3 + 1
    view = cg.jit(fn, config=dict(max_capture_size=8, output_mode="view"))
    copy = cg.jit(fn, config=dict(max_capture_size=8))
    x0, x1, x2 = rand(rng, 4, 5), rand(rng, 4, 5), rand(rng, 4, 5)
    view(x0)  # the call that captures runs the function as it is: its result is the plain call's
    copy(x0)
    v1 = view(x1)
    c1 = copy(x1)
    expected1 = cupy.asnumpy(fn(x1))
    view(x2)
    copy(x2)
    np.testing.assert_array_equal(cupy.asnumpy(c1), expected1)  # owned by the caller
    np.testing.assert_array_equal(cupy.asnumpy(v1), cupy.asnumpy(fn(x2)))  # the documented footgun


@pytest.mark.parametrize(
    "body, words",
    [
        (lambda x: x * cublas.nrm2(x.ravel()), "cuBLAS"),  # level-1 BLAS: not routed (x @ x.T is)
        (lambda x: x + cupy.random.binomial(10, 0.5, size=x.shape).astype(x.dtype), "cuRAND"),  # never routed
        (lambda x: x * float(x.sum()), "device-to-host"),
    ],
    ids=["cublas", "curand", "d2h"],
)
def test_uncapturable_ops_fall_back_with_reason_and_engine_keeps_working(body, words):
    rng = np.random.default_rng(4)
    graphed = cg.jit(body, config=dict(max_capture_size=16))
    x = rand(rng, 4, 4)
    out = graphed(x)  # falls back: eager result
    assert out.shape == body(x).shape
    if words != "cuRAND":
        assert_same_array(out, body(x))
    details = graphed.stats().last_detail_by_reason
    assert any(words in d for d in details.values()), details
    graphed(x)
    assert graphed.registry.num_graphs() == 0
    # raise mode names the op
    strict = cg.jit(body, config=dict(max_capture_size=16, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match=words):
        strict(x)
    # afterwards a fresh function captures and replays correctly on the same device
    fn = affine_chain(5)
    fresh = cg.jit(fn, config=dict(max_capture_size=16))
    for n in (3, 9, 3):
        y = rand(rng, n, 8)
        assert_same_array(fresh(y), fn(y))
    assert fresh.registry.num_graphs() == 2


def test_user_exception_mid_capture_falls_back_once_and_leaves_stream_usable():
    """Only the capture run raises: the call runs eagerly, the key is marked failed (counted once,
    never re-captured until clear()), the stream is not left capturing, other functions capture."""
    rng = np.random.default_rng(5)

    def flaky(x):
        y = x * 2
        if cupy.cuda.get_current_stream().is_capturing():  # warm-up passes, the capture run raises
            raise ValueError("boom in user code")
        return y + 1

    graphed = cg.jit(flaky, config=dict(max_capture_size=8))
    for _ in range(3):
        x = rand(rng, 3, 3)
        assert_same_array(graphed(x), x * 2 + 1)
        assert not cupy.cuda.get_current_stream().is_capturing()
    stats = graphed.stats()
    assert stats.capture_failures == 1 and stats.fallbacks == 3 and graphed.registry.num_graphs() == 0
    assert any("boom in user code" in d for d in stats.last_detail_by_reason.values())
    strict = cg.jit(flaky, config=dict(max_capture_size=8, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match="boom"):
        strict(rand(rng, 3, 3))
    assert not cupy.cuda.get_current_stream().is_capturing()
    fn = affine_chain(3)
    other = cg.jit(fn, config=dict(max_capture_size=8))
    x = rand(rng, 3, 3)
    assert_same_array(other(x), fn(x))


def test_cufft_pipeline_replays():
    rng = np.random.default_rng(6)

    def spectral(x):
        return cupy.fft.irfft(cupy.fft.rfft(x, axis=1) * 0.5, n=x.shape[1], axis=1)

    graphed = cg.jit(spectral, config=dict(max_capture_size=16))
    for n in (5, 16, 5, 2):
        x = rand(rng, n, 64)
        assert_same_array(graphed(x), spectral(x))
    assert graphed.registry.num_graphs() == 3


def test_memory_eight_sizes_share_the_pool_and_eviction_returns_it():
    rng = np.random.default_rng(7)
    fn = affine_chain(10)
    sizes = [8, 16, 32, 64, 128, 256, 384, 512]
    alone = cg.jit(fn, config=dict(capture_sizes=[512]))
    alone.warmup(rand(rng, 512, 1024), progress=False)
    largest = alone.registry.backend.pool_bytes()
    alone.clear()
    assert alone.registry.backend.pool_bytes() == 0

    many = cg.jit(fn, config=dict(capture_sizes=sizes))
    assert many.warmup(rand(rng, 8, 1024), progress=False) == len(sizes)
    held = many.registry.backend.pool_bytes()
    assert held <= 1.25 * largest, (held, largest)
    for n in (5, 100, 512, 300):
        x = rand(rng, n, 1024)
        assert_same_array(many(x), fn(x))
    many.clear()
    assert many.registry.backend.pool_bytes() == 0


def test_family_blocks_of_4_kib_or_more_start_on_4_kib_boundaries():
    """Static buffers and outputs start on a 4 KiB boundary whatever was allocated before (the
    100-kernel chain's graph ran 5 % slower on buffers 512 bytes past one: benchmarks/hot_path.md)."""
    rng = np.random.default_rng(9)
    fn = affine_chain(2)
    misplaced = [cupy.cuda.Memory(512) for _ in range(3)]  # cudaMalloc packs what follows 512 bytes on
    graphed = cg.jit(fn, config=dict(capture_sizes=[64], input_binding="copy"))
    x = rand(rng, 64, 1024)
    assert_same_array(graphed(x), fn(x))
    (entry,) = graphed.registry.entries()
    leaves, _ = flatten((entry.static_inputs, entry.cudagraph.outputs), lambda v: isinstance(v, cupy.ndarray))
    placed = [int(leaf.data.ptr) % 4096 for leaf in leaves if leaf.nbytes >= 4096]
    assert placed and placed == [0] * len(placed), placed
    del misplaced


def test_memory_budget_is_never_exceeded():
    rng = np.random.default_rng(8)
    fn = affine_chain(4)
    probe = cg.jit(fn, config=dict(capture_sizes=[256]))
    probe(rand(rng, 256, 512))
    one = probe.registry.total_bytes()
    budget = int(2.5 * one)
    graphed = cg.jit(fn, config=dict(max_capture_size=256, memory_budget=budget))
    for n in rng.integers(1, 257, size=40).tolist():
        x = rand(rng, n, 512)
        assert_same_array(graphed(x), fn(x))
        assert graphed.registry.total_bytes() <= budget
    assert graphed.stats().evictions > 0


def test_four_threads_share_one_function():
    fn = affine_chain(8)
    graphed = cg.jit(fn, config=dict(max_capture_size=64))
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        stream = cupy.cuda.Stream(non_blocking=True)
        try:
            with stream:
                for _ in range(30):
                    x = rand(rng, int(rng.integers(1, 65)), 33)
                    got = graphed(x)
                    want = fn(x)
                    stream.synchronize()
                    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors[0]
    stats = graphed.stats()
    assert stats.hits + stats.misses == 120


def test_stream_ordering_with_surrounding_work():
    rng = np.random.default_rng(9)
    fn = affine_chain(6)
    graphed = cg.jit(fn, config=dict(max_capture_size=32))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = rand(rng, 20, 4096)
        graphed(x)  # capture
        for _ in range(5):
            src = rand(rng, 20, 4096)
            buf = cupy.empty_like(src)
            buf[...] = src * 1.5  # producer on the user's stream right before the call
            out = graphed(buf)
            consumed = out + 1.0  # consumer right after
            stream.synchronize()
            np.testing.assert_array_equal(cupy.asnumpy(consumed), cupy.asnumpy(fn(src * 1.5) + 1.0))


def test_wrapper_with_forward_context_and_manager_on_gpu():
    rng = np.random.default_rng(10)
    fn = affine_chain(4)
    wrapper = cg.CUDAGraphWrapper(fn, cg.CUDAGraphMode.FULL, cg.CUDAGraphOptions(debug=True))
    persistent = rand(rng, 8, 16)
    desc = cg.BatchDescriptor(8)
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, desc):
        wrapper(persistent)  # capture
        new = rand(rng, 8, 16)
        persistent[...] = new
        assert_same_array(wrapper(persistent), fn(new))
        with pytest.raises(cg.InputMismatchError, match="addresses"):
            wrapper(rand(rng, 8, 16))
    assert wrapper.stats().captures == 1

    manager = cg.CUDAGraphManager(dict(max_capture_size=32))
    for n in (4, 30, 4):
        x = rand(rng, n, 16)
        assert_same_array(manager.execute_or_capture(n, None, fn, [x]), fn(x))
    assert manager.stats().hits == 1 and manager.stats().captures == 2


def test_non_contiguous_and_sliced_inputs_are_copied_correctly():
    rng = np.random.default_rng(11)
    fn = lambda x: cupy.sin(x) * 2
    graphed = cg.jit(fn, config=dict(max_capture_size=16))
    base = rand(rng, 12, 20)
    for x in (base[:, ::2], base.T[:7].copy().T.T, base[3:9], cupy.asfortranarray(base[:5])):
        assert_same_array(graphed(x), fn(x))


def test_pool_memory_returns_after_clear_with_diagnostics():
    rng = np.random.default_rng(12)
    fn = affine_chain(3)
    graphed = cg.jit(fn, config=dict(capture_sizes=[64]))
    graphed(rand(rng, 64, 256))
    pool = graphed.registry.backend.pool
    assert pool.total_bytes() > 0
    graphed.clear()
    assert (pool.used_bytes(), pool.total_bytes()) == (0, 0)


def test_plugin_helpers_on_the_gpu(cupygraph_leak_check, graph_stats):
    from cupygraph.testing import assert_capturable, assert_graph_matches_eager

    rng = np.random.default_rng(13)
    fn = affine_chain(12)
    assert_graph_matches_eager(fn, rand(rng, 24, 48), sizes=[1, 7, 24, 33], config=dict(max_capture_size=64))
    assert_capturable(fn, rand(rng, 5, 48), config=dict(max_capture_size=8))
    total = graph_stats.total()
    assert total.captures >= 5 and total.fallbacks == 0
