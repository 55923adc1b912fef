"""PIECEWISE flows, adaptive capture and the stream dispatcher on the NumPy host backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.backends.graph_breaks import active_recorder, recording_breaks

HOST = dict(backend="host")


def test_graph_break_is_a_plain_call_outside_recording_and_idempotent():
    calls = []

    @cg.graph_break
    def op(x):
        calls.append(x.shape)
        return x + 1

    assert op(np.zeros(3)).tolist() == [1, 1, 1] and calls == [(3,)]
    assert cg.graph_break(op) is op
    assert op.__name__ == "op"
    assert active_recorder() is None


def test_graph_break_routes_to_the_active_recorder_and_restores_the_previous_one():
    class Recorder:
        def __init__(self):
            self.seen = []

        def break_at(self, fn, args, kwargs):
            self.seen.append(fn.__name__)
            return "recorded"

    def matmul(a, b):
        return a @ b

    outer, inner = Recorder(), Recorder()
    wrapped = cg.graph_break(matmul)
    with recording_breaks(outer):
        with recording_breaks(inner):
            assert wrapped(np.eye(2), np.eye(2)) == "recorded"
        assert active_recorder() is outer
    assert active_recorder() is None
    assert inner.seen == ["matmul"] and outer.seen == []


def test_full_and_piecewise_on_host_counts_modes():
    scale = cg.graph_break(lambda y: y @ np.eye(y.shape[1], dtype=y.dtype))

    def fn(x, decode):
        return np.tanh(scale(x * 2.0))

    graphed = cg.jit(
        fn, config=dict(HOST, mode="FULL_AND_PIECEWISE", max_capture_size=16, max_num_reqs=16,
                        route_library_calls=False),  # `@` refused as unrouted CuPy refuses it (issue 29 routes it)
        descriptor_fn=lambda x, decode: cg.BatchDescriptor(x.shape[0], num_reqs=x.shape[0], uniform_decode=decode),
    )
    rng = np.random.default_rng(0)
    for n, decode in [(3, True), (3, False), (5, True), (3, True), (5, False), (3, False), (5, False)]:
        x = rng.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(graphed(x, decode), fn(x, decode))
    stats = graphed.stats()
    # The graph break is an eager step between PIECEWISE pieces; in FULL it is captured like
    # everything else, and `@` (cuBLAS under CuPy) is refused there: decode keys run eagerly. (The
    # calls that captured the two PIECEWISE keys ran the function as it is; their next calls replay.)
    assert stats.replays_by_mode == {"PIECEWISE": 2}
    assert stats.captures_by_mode == {"PIECEWISE": 2}
    assert stats.fallbacks_by_reason == {"library_call": 3} and stats.capture_failures == 2


def test_full_decode_only_runs_mixed_batches_eagerly():
    graphed = cg.jit(
        lambda x, decode: x + 1, config=dict(HOST, mode="FULL_DECODE_ONLY", max_capture_size=16, max_num_reqs=16),
        descriptor_fn=lambda x, decode: cg.BatchDescriptor(x.shape[0], num_reqs=x.shape[0], uniform_decode=decode),
    )
    x = np.ones((4, 2))
    graphed(x, True), graphed(x, False)
    stats = graphed.stats()
    assert stats.captures_by_mode == {"FULL": 1} and stats.fallbacks == 1


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x * 2


def test_adaptive_wrapper_captures_hot_shapes_only():
    runnable = Counter()
    wrapper = cg.AdaptiveCUDAGraphWrapper(runnable, cg.CUDAGraphMode.FULL, capture_after=3, backend=cg.HostBackend())
    buffers = {n: np.full((n, 2), float(n)) for n in (2, 4)}
    for _ in range(2):
        with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(2)):
            np.testing.assert_array_equal(wrapper(buffers[2]), buffers[2] * 2)
    assert wrapper.get_cached_descriptors() == []
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(2)):
        wrapper(buffers[2])
    assert wrapper.get_cached_descriptors() == [cg.BatchDescriptor(2)]
    assert wrapper.get_hot_shapes(1) == [(cg.BatchDescriptor(2), 3)]
    assert wrapper.stats().fallbacks_by_reason == {"cold_key": 2}
    assert "capture_after=3" in wrapper.stats().detail("cold_key")


def test_adaptive_wrapper_eviction_protects_hot_entries_and_prewarm():
    wrapper = cg.AdaptiveCUDAGraphWrapper(
        Counter(), cg.CUDAGraphMode.FULL, max_cached_graphs=2, min_replays_to_keep=2, capture_after=1,
        backend=cg.HostBackend(),
    )
    arrays = {n: np.ones((n, 3)) for n in range(1, 7)}
    assert wrapper.prewarm([1], lambda d: arrays[d.num_tokens]) == 1
    for _ in range(3):  # make size 1 hot
        with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(1)):
            wrapper(arrays[1])
    for n in range(2, 7):
        with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(n)):
            wrapper(arrays[n])
    cached = wrapper.get_cached_descriptors()
    assert cg.BatchDescriptor(1) in cached and len(cached) == 2
    assert wrapper.stats().evictions == 4
    with pytest.raises(ValueError, match="capture_after"):
        cg.AdaptiveCUDAGraphWrapper(Counter(), cg.CUDAGraphMode.FULL, capture_after=0, backend=cg.HostBackend())


def test_stream_dispatcher_on_host_runs_every_request_with_own_runners():
    dispatcher = cg.StreamDispatcher(lambda x: x * 3, num_streams=3, config=dict(HOST, max_capture_size=8))
    requests = [(np.full((n, 2), float(n)),) for n in (1, 2, 3, 4, 5)]
    results = dispatcher.run_batch(requests)
    for (x,), out in zip(requests, results):
        np.testing.assert_array_equal(out, x * 3)
    assert [dispatcher._select_stream() for _ in range(3)] == [2, 0, 1]
    assert sum(r.stats().calls for r in dispatcher.runners) == 5
    assert dispatcher.dispatch(cg.BatchDescriptor(3))[0] is cg.CUDAGraphMode.FULL
    assert len(dispatcher.stats()["streams"]) == 3
    with pytest.raises(ValueError, match="num_streams"):
        cg.StreamDispatcher(lambda x: x, num_streams=0)


def test_stream_dispatcher_keeps_the_dispatchers_reentrant_lock():
    # Regression: the round-robin lock once replaced the dispatcher's RLock, so enable_mode
    # (which re-enters it through initialize_cudagraph_keys) deadlocked.
    dispatcher = cg.StreamDispatcher(lambda x: x * 3, num_streams=2, config=dict(HOST, max_capture_size=8))
    dispatcher.disable_mode(cg.CUDAGraphMode.FULL)
    assert dispatcher.dispatch(cg.BatchDescriptor(3))[0] is cg.CUDAGraphMode.NONE
    # In a thread, so a regression fails here instead of hanging the suite.
    worker = threading.Thread(target=dispatcher.enable_mode, args=(cg.CUDAGraphMode.FULL,), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "enable_mode deadlocked on the dispatcher's lock"
    assert dispatcher.dispatch(cg.BatchDescriptor(3))[0] is cg.CUDAGraphMode.FULL


def test_adaptive_prewarm_does_not_capture_a_key_that_failed_again():
    calls = []

    def broken(x):
        calls.append(1)
        raise ValueError("no graph for me")

    wrapper = cg.AdaptiveCUDAGraphWrapper(broken, cg.CUDAGraphMode.FULL, backend=cg.HostBackend())
    arrays = {4: np.ones((4, 3))}
    assert wrapper.prewarm([4], lambda d: arrays[d.num_tokens]) == 0
    tried = len(calls)
    assert tried >= 1
    assert wrapper.prewarm([4], lambda d: arrays[d.num_tokens]) == 0
    assert len(calls) == tried  # the failed key is remembered, as a call's would be
