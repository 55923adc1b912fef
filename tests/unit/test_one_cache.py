"""One graph cache (issue 12): the registry holds every front door's graphs and decides capture-after,
failed keys, eviction and memory in one place; the vLLM-style wrappers honour the config."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import cupygraph as cg
import cupygraph.config.defaults
from cupygraph import BatchDescriptor as BD
from cupygraph import CUDAGraphMode as Mode
from cupygraph.cache import CaptureRequest, Eager, GraphKey
from cupygraph.cache.eviction import LeastFrequentlyUsed, LeastRecentlyUsed, eviction_policy
from cupygraph.cache.store import CAPTURE_NOW
from cupygraph.reasons import FallbackReason

HOST = {"backend": "host", "capture_sizes": [1, 2, 4, 8]}


def rows(n: int, seed: int = 0, width: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width))


def affine(x):
    return x * 3.0 - 1.0


def call(wrapper, arrays, n):
    with cg.cudagraph_context(wrapper.runtime_mode, BD(n)):
        return wrapper(arrays[n])


class SpyBackend(cg.HostBackend):
    """The host backend, noting what each capture was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.captures: list[dict] = []

    def capture(self, fn, args, kwargs, **options):
        self.captures.append(options)
        return super().capture(fn, args, kwargs, **options)


# -- the cache decides: replay, cold, failed, capture now -------------------------------------------


def test_the_cache_decides_what_a_key_does():
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(capture_after=3, **HOST))
    key = GraphKey(BD(4))
    for seen in (1, 2):  # cold: counted, and said why
        verdict = registry.verdict_for(key)
        assert isinstance(verdict, Eager) and verdict.reason is FallbackReason.COLD_KEY
        assert f"seen {seen} of capture_after=3" in str(verdict)
    assert registry.verdict_for(key) is CAPTURE_NOW
    assert registry.verdict_for(key, force=True) is CAPTURE_NOW  # warm-up: no capture_after
    x = rows(4)
    entry = registry.capture_entry(key, affine, [x])
    assert registry.verdict_for(key) is entry
    # A key whose capture failed is remembered by the cache, and forgotten by clear().
    failing = GraphKey(BD(8))
    request = CaptureRequest(lambda x: x * float(x.sum()), [rows(8)], batched=(0,))
    why = registry.capture_or_fail(failing, request, name="reads")
    assert isinstance(why, Eager) and why.reason is FallbackReason.DEVICE_TO_HOST
    assert registry.verdict_for(failing, force=True) is why
    registry.clear()
    assert registry.verdict_for(failing, force=True) is CAPTURE_NOW
    assert registry.stats().capture_failures == 1


class Watch:
    """A front door's ``CaptureWatch`` that notes what the cache told it, and may refuse a capture."""

    def __init__(self, refuse: bool = False):
        self.told: list[tuple[str, GraphKey, int]] = []
        self.refuse = refuse

    def bound(self, key):
        self.told.append(("bound", key, 0))

    def before_capture(self, key, held):
        self.told.append(("before_capture", key, len(held)))
        if self.refuse:
            raise cg.InputMismatchError("refused by the front door")


def test_a_miss_is_one_call_into_the_cache():
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(capture_after=2, **HOST))
    key, x = GraphKey(BD(4)), rows(3)
    request = CaptureRequest(affine, [x], batched=(0,))
    watch = Watch()
    found, captured = registry.find_or_capture(key, request, name="affine", watch=watch)
    assert isinstance(found, Eager) and found.reason is FallbackReason.COLD_KEY and not captured
    assert watch.told == []  # nothing to capture yet: the front door hears nothing
    found, captured = registry.find_or_capture(key, request, name="affine", watch=watch)
    assert isinstance(found, cg.CUDAGraphEntry) and captured and watch.told == [("before_capture", key, 0)]
    np.testing.assert_array_equal(found.replay([x]), affine(x))
    again, captured = registry.find_or_capture(key, request, name="affine", watch=watch)
    assert again is found and not captured and len(watch.told) == 1


def test_a_refused_call_or_pad_value_is_not_remembered_as_a_failed_key():
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(pad_value=-1, **HOST))
    unsigned = np.ones((3, 2), np.uint8)
    with pytest.raises(cg.InputMismatchError, match=r"pad_value=-1 .* argument 0 of pads\(\) \(uint8\)"):
        registry.find_or_capture(GraphKey(BD(4)), CaptureRequest(affine, [unsigned], batched=(0,)), name="pads")
    with pytest.raises(cg.InputMismatchError, match="refused by the front door"):
        registry.find_or_capture(GraphKey(BD(8)), CaptureRequest(affine, [rows(5)], batched=(0,)), name="f",
                                 watch=Watch(refuse=True))
    assert registry.num_graphs() == 0 and registry.stats().capture_failures == 0
    assert registry.verdict_for(GraphKey(BD(4))) is CAPTURE_NOW and registry.verdict_for(GraphKey(BD(8))) is CAPTURE_NOW


def test_failed_keys_of_jit_live_in_its_registry():
    f = cg.jit(lambda x: x * float(x.sum()), config=HOST)
    for seed in range(3):
        x = rows(3, seed)
        np.testing.assert_array_equal(f(x), x * float(x.sum()))
    assert f.stats().capture_failures == 1  # remembered: no capture on every call
    f.registry.forget_failures()
    f(rows(3))
    assert f.stats().capture_failures == 2


# -- the wrapper's graphs are in a registry built from the config -----------------------------------------


def test_wrapper_captures_on_first_sight_by_default_as_the_config_says():
    arrays = {n: rows(n, n) for n in (2, 4)}
    for wrapper_type in (cg.CUDAGraphWrapper, cg.AdaptiveCUDAGraphWrapper):
        wrapper = wrapper_type(affine, Mode.FULL, backend=cg.HostBackend())
        np.testing.assert_array_equal(call(wrapper, arrays, 2), affine(arrays[2]))
        assert wrapper.get_cached_descriptors() == [BD(2)], wrapper_type
        assert isinstance(wrapper.registry, cg.CUDAGraphRegistry)
        assert wrapper.stats().to_dict() == wrapper.registry.stats().to_dict() and wrapper.stats().fallbacks == 0


def test_wrapper_honours_capture_after_eviction_and_min_replays_from_its_config():
    config = dict(HOST, capture_after=2, max_cached_graphs=2, eviction="lfu", min_replays_to_keep=0)
    wrapper = cg.CUDAGraphWrapper(affine, Mode.FULL, config=config)
    arrays = {n: rows(n, n) for n in (1, 2, 4)}
    for n in (1, 1, 1, 1, 2, 2, 4, 4):  # 1 is hot; 2 and 4 are captured on their second sight
        np.testing.assert_array_equal(call(wrapper, arrays, n), affine(arrays[n]))
    stats = wrapper.stats()
    assert stats.fallbacks_by_reason == {"cold_key": 3}
    # lfu: capturing 4 evicted 2 (one replay), not 1, although 1 was used longer ago.
    assert wrapper.get_cached_descriptors() == [BD(1), BD(4)]
    assert stats.evictions_by_reason == {"max_cached_graphs": 1}
    assert stats.captures - stats.evictions == len(wrapper.get_cached_descriptors())
    # The seed's max_cached_graphs argument overrides the config's.
    assert cg.CUDAGraphWrapper(affine, Mode.FULL, None, 1, config=config).registry.config.max_cached_graphs == 1


def test_wrapper_memory_budget_evicts_like_every_front_door():
    one_graph = 4 * 3 * 8  # float64 static output of affine at 4 rows; inputs are the caller's
    wrapper = cg.CUDAGraphWrapper(affine, Mode.FULL, config=dict(HOST, memory_budget=2 * one_graph))
    arrays = {n: rows(4, n) for n in (1, 2, 4)}
    for n in (1, 2, 4):
        with cg.cudagraph_context(Mode.FULL, BD(n)):
            wrapper(arrays[n])
    assert len(wrapper.get_cached_descriptors()) == 2
    assert wrapper.stats().evictions_by_reason == {"memory_budget": 1}


def test_weak_ref_output_false_returns_outputs_the_caller_owns():
    arrays = {2: rows(2)}
    viewing = cg.CUDAGraphWrapper(affine, Mode.FULL, backend=cg.HostBackend())
    owning = cg.CUDAGraphWrapper(affine, Mode.FULL, cg.CUDAGraphOptions(weak_ref_output=False),
                                 backend=cg.HostBackend())
    assert call(viewing, arrays, 2) is call(viewing, arrays, 2)  # the static outputs themselves
    first = call(owning, arrays, 2)
    kept = first.copy()
    arrays[2][...] = rows(2, seed=5)
    second = call(owning, arrays, 2)
    np.testing.assert_array_equal(second, affine(arrays[2]))
    assert second is not first and np.array_equal(first, kept)  # the next replay left it alone


@pytest.mark.parametrize(("gc_disable", "freeze"), [(None, True), (True, True), (False, False)])
def test_gc_disable_is_the_configs_gc_freeze_under_vllms_name(gc_disable, freeze):
    backend = SpyBackend()
    wrapper = cg.CUDAGraphWrapper(affine, Mode.FULL, cg.CUDAGraphOptions(gc_disable=gc_disable), backend=backend)
    call(wrapper, {2: rows(2)}, 2)
    assert [c["gc_freeze"] for c in backend.captures] == [freeze]
    assert wrapper.registry.config.gc_freeze is freeze


def test_wrapper_never_warms_up_on_the_callers_arrays():
    # A warm-up would run the runnable once more on the arrays it captures by address: an in-place
    # update would be applied twice. Whatever the config says, the wrapper captures without one.
    backend = SpyBackend()
    wrapper = cg.CUDAGraphWrapper(affine, Mode.FULL, config=dict(HOST, num_warmups=3), backend=backend)
    call(wrapper, {2: rows(2)}, 2)
    assert [c["num_warmups"] for c in backend.captures] == [0]


def test_wrapper_capture_failure_falls_back_once_and_is_remembered():
    def reads(x):
        return x * float(x.sum())  # a device-to-host read: the graph cannot hold it

    wrapper = cg.CUDAGraphWrapper(reads, Mode.FULL, backend=cg.HostBackend())
    x = rows(2)
    for _ in range(3):
        np.testing.assert_array_equal(call(wrapper, {2: x}, 2), reads(x))
    stats = wrapper.stats()
    assert stats.capture_failures == 1 and stats.fallbacks_by_reason == {"device_to_host_read": 3}
    strict = cg.CUDAGraphWrapper(reads, Mode.FULL, config=dict(HOST, on_capture_error="raise"))
    with pytest.raises(cg.CaptureError, match="device-to-host"):
        call(strict, {2: x}, 2)


def test_wrapper_replay_that_differs_from_its_capture_is_never_returned():
    state = {"extra": 0}

    def grows(x):  # Python state the graph cannot see changes the output's shape
        return np.concatenate([x, x[:, :1].repeat(state["extra"], axis=1)], axis=1)

    wrapper = cg.CUDAGraphWrapper(grows, Mode.FULL, backend=cg.HostBackend())
    x = rows(2)
    np.testing.assert_array_equal(call(wrapper, {2: x}, 2), grows(x))
    state["extra"] = 2
    for _ in range(2):
        got = call(wrapper, {2: x}, 2)
        assert got.shape == (2, 5) and np.array_equal(got, grows(x))
    stats = wrapper.stats()
    assert stats.fallbacks_by_reason == {"replay_mismatch": 2} and stats.evictions_by_reason == {"failed_replay": 1}
    assert wrapper.get_cached_descriptors() == []


def test_wrapper_runs_eagerly_when_the_config_or_the_environment_disables_graphs(monkeypatch):
    arrays = {2: rows(2)}
    off = cg.CUDAGraphWrapper(affine, Mode.FULL, config=dict(HOST, mode="NONE"))
    np.testing.assert_array_equal(call(off, arrays, 2), affine(arrays[2]))
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", True)  # its one warning: another test checks it
    disabled = cg.CUDAGraphWrapper(affine, Mode.FULL, backend=cg.HostBackend())
    np.testing.assert_array_equal(call(disabled, arrays, 2), affine(arrays[2]))
    for wrapper in (off, disabled):
        assert wrapper.get_cached_descriptors() == [] and wrapper.stats().fallbacks_by_reason == {"mode_none": 1}


def test_adaptive_wrapper_keywords_override_the_config_and_lfu_is_its_default():
    adaptive = cg.AdaptiveCUDAGraphWrapper(affine, Mode.FULL, None, 3, 2, capture_after=4, memory_budget="1MiB",
                                           backend=cg.HostBackend())
    config = adaptive.registry.config
    assert (config.max_cached_graphs, config.min_replays_to_keep, config.capture_after) == (3, 2, 4)
    assert (config.memory_budget, config.eviction) == (2**20, "lfu")
    assert isinstance(adaptive.registry.eviction, LeastFrequentlyUsed)
    given = cg.AdaptiveCUDAGraphWrapper(affine, Mode.FULL, config=dict(HOST, eviction="lru"))
    assert isinstance(given.registry.eviction, LeastRecentlyUsed)


# -- the dispatcher owns keys; the registry holds registered graphs ----------------------------------------


def test_register_graph_hands_the_graph_to_the_registry():
    config = cg.CUDAGraphConfig(mode="PIECEWISE", **HOST)
    dispatcher = cg.CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(config.mode, 1)
    graph = object()
    dispatcher.register_graph(BD(4), graph, [0x10])
    held = dispatcher.registry.registered_graph(BD(4))
    assert held is not None and held.graph is graph and held.input_ptrs == (0x10,)
    assert dispatcher.dispatch(BD(3)) == (Mode.FULL, BD(4))
    dispatcher.registry.clear()  # the one cache drops it: the dispatcher holds no graph of its own
    assert not dispatcher.has_graph(BD(4)) and dispatcher.get_graph(BD(4)) is None


# -- entries and eviction --------------------------------------------------------------------------------


def test_an_entry_that_writes_back_is_a_plain_entry_and_goes_when_evicted():
    def scales_in_place(x):
        x *= 2.0
        return x + 0.0

    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(**HOST))
    x = rows(3)
    entry = registry.capture(3, None, scales_in_place, [(3, 3)], inputs=[x.copy()])
    assert type(entry) is cg.CUDAGraphEntry and entry.written == (0,)
    assert entry.cudagraph is entry.recording
    y = x.copy()
    np.testing.assert_array_equal(entry.replay([y]), x * 2)
    np.testing.assert_array_equal(y, x * 2)  # written back into the caller's array, as eagerly
    alive = weakref.ref(entry)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert registry.remove(3)
        del entry
        assert alive() is None  # no reference cycle keeps an evicted entry (and its buffers) alive
    finally:
        if was_enabled:
            gc.enable()


def test_eviction_policies_are_strategies_named_by_the_config():
    assert isinstance(eviction_policy("lru"), LeastRecentlyUsed)
    assert eviction_policy("lfu", 3).min_replays_to_keep == 3
    with pytest.raises(ValueError, match="valid policies: lru, lfu"):
        eviction_policy("mru")
