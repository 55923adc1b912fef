"""CUDAGraphWrapper and cudagraph_context on the host backend (vLLM semantics: no input copies)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cupygraph import (
    BatchDescriptor,
    CUDAGraphMode,
    CUDAGraphOptions,
    CUDAGraphWrapper,
    HostBackend,
    InputMismatchError,
    cudagraph_context,
    get_forward_context,
)

FULL, PIECEWISE, NONE = CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE, CUDAGraphMode.NONE


class Runnable:
    """A callable with attributes, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.hidden_size = 64

    def __call__(self, x, y):
        self.calls += 1
        return x * y + y.sum(axis=0)

    def describe(self) -> str:
        return "runnable"


def rand(rows: int, seed: int = 0, d: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, d))


def make(runtime_mode=FULL, **kw) -> tuple[CUDAGraphWrapper, Runnable]:
    runnable = Runnable()
    return CUDAGraphWrapper(runnable, runtime_mode, backend=HostBackend(), **kw), runnable


def test_outside_context_calls_directly():
    wrapper, runnable = make()
    x, y = rand(3), rand(3, 1)
    out = wrapper(x, y)
    assert np.array_equal(out, x * y + y.sum(axis=0))
    assert runnable.calls == 1
    assert wrapper.get_cached_descriptors() == []
    assert wrapper.stats().calls == 0


@pytest.mark.parametrize("context_mode", [NONE, PIECEWISE])
def test_other_mode_calls_directly(context_mode):
    wrapper, runnable = make(FULL)
    x, y = rand(3), rand(3, 1)
    desc = BatchDescriptor(3) if context_mode is not NONE else None
    with cudagraph_context(context_mode, desc):
        for _ in range(2):
            assert np.array_equal(wrapper(x, y), x * y + y.sum(axis=0))
    assert runnable.calls == 2
    assert wrapper.get_cached_descriptors() == []


def test_full_context_captures_then_replays_persistent_buffers():
    wrapper, _runnable = make()
    x, y = rand(4), rand(4, 1)
    desc = BatchDescriptor(4)
    with cudagraph_context(FULL, desc):
        first = wrapper(x, y)
        assert np.array_equal(first, x * y + y.sum(axis=0))
        stats = wrapper.stats()
        assert stats.captures == 1 and stats.misses == 1 and stats.hits == 0
        assert wrapper.get_cached_descriptors() == [desc]
        # New data written in place into the captured arrays: the replay computes from it.
        x[:] = rand(4, 2)
        y[:] = rand(4, 3)
        second = wrapper(x, y)
        assert np.array_equal(second, x * y + y.sum(axis=0))
        stats = wrapper.stats()  # (statistics are read anew: each read is a new object)
        assert stats.hits == 1 and stats.captures == 1
        # Outputs are the graph's static buffers: the same array each replay.
        assert second is first
    assert wrapper.get_cached_descriptors() == [desc]


def test_a_numpy_scalar_output_stays_a_scalar_the_next_replay_leaves_alone():
    # The plain runnable returns a NumPy scalar (a reduction): immutable, unlike the static 0-d buffer a
    # replay rewrites. weak_ref_output covers the graph's arrays, not a scalar the caller was given.
    def total(x):
        return x.sum()

    wrapper = CUDAGraphWrapper(total, FULL, backend=HostBackend())
    x = rand(4)
    with cudagraph_context(FULL, BatchDescriptor(4)):
        wrapper(x)  # captures
        held = wrapper(x)  # a replay
        assert isinstance(held, np.generic) and held == x.sum()
        x[:] = rand(4, 5)
        wrapper(x)
    assert held == rand(4).sum()
    assert wrapper.stats().hits == 2


def test_piecewise_wrapper_uses_piecewise_context():
    wrapper, _ = make(PIECEWISE)
    x, y = rand(2), rand(2, 1)
    with cudagraph_context(FULL, BatchDescriptor(2)):
        wrapper(x, y)
    assert wrapper.stats().captures == 0
    with cudagraph_context(PIECEWISE, BatchDescriptor(2)):
        wrapper(x, y)
        wrapper(x, y)
    assert wrapper.stats().captures == 1 and wrapper.stats().hits == 1
    assert wrapper.stats().captures_by_mode == {"PIECEWISE": 1}


def test_debug_detects_new_input_address():
    wrapper, _ = make(options=CUDAGraphOptions(debug=True))
    x, y = rand(3), rand(3, 1)
    with cudagraph_context(FULL, BatchDescriptor(3)):
        wrapper(x, y)
        wrapper(x, y)  # same arrays: fine
        fresh = x.copy()
        with pytest.raises(InputMismatchError) as info:
            wrapper(fresh, y)
    message = str(info.value)
    assert hex(x.__array_interface__["data"][0]) in message
    assert hex(fresh.__array_interface__["data"][0]) in message
    assert "in place" in message


def test_without_debug_new_arrays_are_not_checked():
    # The contract: the graph reads the captured addresses, so a new array is silently ignored.
    wrapper, _ = make()
    x, y = rand(3), rand(3, 1)
    with cudagraph_context(FULL, BatchDescriptor(3)):
        wrapper(x, y)
        out = wrapper(rand(3, 7), y)
    assert np.array_equal(out, x * y + y.sum(axis=0))


def test_lru_eviction_with_max_cached_graphs():
    wrapper, _ = make(max_cached_graphs=2)
    buffers = {n: (rand(n, n), rand(n, n + 10)) for n in (1, 2, 4)}

    def call(n):
        with cudagraph_context(FULL, BatchDescriptor(n)):
            x, y = buffers[n]
            return wrapper(x, y)

    call(1)
    call(2)
    call(1)  # 1 becomes the most recently used
    call(4)
    assert wrapper.get_cached_descriptors() == [BatchDescriptor(1), BatchDescriptor(4)]
    stats = wrapper.stats()
    assert stats.evictions == 1 and stats.evictions_by_reason == {"max_cached_graphs": 1}
    assert stats.captures - stats.evictions == len(wrapper.get_cached_descriptors())
    call(2)  # re-captured
    assert wrapper.stats().captures == 4
    x, y = buffers[2]
    assert np.array_equal(call(2), x * y + y.sum(axis=0))


def test_unwrap_and_attribute_pass_through():
    wrapper, runnable = make()
    assert wrapper.unwrap() is runnable
    assert wrapper.hidden_size == 64
    assert wrapper.describe() == "runnable"
    runnable.hidden_size = 128
    assert wrapper.hidden_size == 128
    assert wrapper.runtime_mode is FULL  # the wrapper's own attributes win
    with pytest.raises(AttributeError):
        _ = wrapper.no_such_attribute


@pytest.mark.parametrize("mode", [NONE, CUDAGraphMode.FULL_AND_PIECEWISE, "full_decode_only"])
def test_runtime_mode_must_be_a_graph_runtime_mode(mode):
    with pytest.raises(ValueError, match="FULL or PIECEWISE"):
        CUDAGraphWrapper(Runnable(), mode, backend=HostBackend())


def test_clear_drops_graphs():
    wrapper, _runnable = make()
    x, y = rand(2), rand(2, 1)
    with cudagraph_context(FULL, BatchDescriptor(2)):
        wrapper(x, y)
        wrapper.clear()
        assert wrapper.get_cached_descriptors() == []
        wrapper(x, y)
    assert wrapper.stats().captures == 2


# -- cudagraph_context ---------------------------------------------------------------------------


def test_context_nesting_restores_outer():
    assert get_forward_context().mode is NONE and get_forward_context().descriptor is None
    with cudagraph_context(FULL, BatchDescriptor(8)) as outer:
        assert get_forward_context() is outer
        with cudagraph_context(PIECEWISE, BatchDescriptor(4)):
            inner = get_forward_context()
            assert inner.mode is PIECEWISE and inner.descriptor == BatchDescriptor(4)
            with cudagraph_context(NONE):
                assert get_forward_context().mode is NONE
            assert get_forward_context() is inner
        assert get_forward_context() is outer
        with pytest.raises(RuntimeError):
            with cudagraph_context(PIECEWISE, BatchDescriptor(2)):
                raise RuntimeError("boom")
        assert get_forward_context() is outer
    assert get_forward_context().mode is NONE


def test_context_is_per_thread():
    seen = {}
    inside, done = threading.Event(), threading.Event()
    wrapper, runnable = make()
    x, y = rand(3), rand(3, 1)

    def other():
        inside.wait(5)
        seen["mode"] = get_forward_context().mode
        wrapper(x, y)  # no context in this thread: a direct call
        with cudagraph_context(PIECEWISE, BatchDescriptor(1)):
            seen["own"] = get_forward_context().mode
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with cudagraph_context(FULL, BatchDescriptor(3)):
        inside.set()
        assert done.wait(5)
        assert get_forward_context().mode is FULL
    thread.join()
    assert seen == {"mode": NONE, "own": PIECEWISE}
    assert wrapper.stats().captures == 0 and runnable.calls == 1


def test_context_argument_errors():
    with pytest.raises(ValueError, match="needs the batch descriptor"):
        with cudagraph_context(FULL):
            pass
    with pytest.raises(ValueError, match="runtime mode"):
        with cudagraph_context(CUDAGraphMode.FULL_AND_PIECEWISE, BatchDescriptor(2)):
            pass
    assert get_forward_context().mode is NONE
