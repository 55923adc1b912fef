"""CudagraphDispatcher with vLLM's semantics, case by case, plus the seed surface and composition."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupygraph.compat.aliases import DispatchMode
from cupygraph.compat.dispatcher import CudagraphDispatcher
from cupygraph.config.model import CUDAGraphConfig, CUDAGraphMode
from cupygraph.dispatch.descriptor import BatchDescriptor
from cupygraph.dispatch.dispatcher import CompositeDecision, CompositeDispatcher
from cupygraph.dispatch.policy import AdaptiveDispatchPolicy, DefaultDispatchPolicy
from cupygraph.dispatch.stats import DispatchStats

NONE, PIECEWISE, FULL = CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL
SIZES = [1, 2, 4, 8, 16, 32]


def make(mode="FULL", q=1, init=True, policy=None, **config):
    config.setdefault("capture_sizes", SIZES)
    cfg = CUDAGraphConfig(mode=mode, uniform_decode_query_len=q, **config)
    dispatcher = CudagraphDispatcher(cfg, policy=policy)
    if init:
        dispatcher.initialize_cudagraph_keys(cfg.mode, q)
    return dispatcher


def decode(num_tokens, q=1, **kw):
    return BatchDescriptor(num_tokens, num_tokens // q, uniform_decode=True, **kw)


def test_dispatch_mode_is_the_one_mode_enum():
    assert DispatchMode is CUDAGraphMode


# -- keys ----------------------------------------------------------------------------------------


def test_full_mode_keys_are_relaxed_sizes():
    d = make("FULL")
    assert d.keys_initialized
    assert d.cudagraph_keys[FULL] == {BatchDescriptor(s) for s in SIZES}
    assert d.cudagraph_keys[PIECEWISE] == set()


def test_piecewise_mode_keys():
    d = make("PIECEWISE")
    assert d.cudagraph_keys[PIECEWISE] == {BatchDescriptor(s) for s in SIZES}
    assert d.cudagraph_keys[FULL] == set()


def test_full_and_piecewise_keys_respect_q_len_and_max_num_reqs():
    d = make("FULL_AND_PIECEWISE", q=2, max_num_reqs=8)
    # PIECEWISE keeps the capture sizes as given (issue 33)...
    assert d.cudagraph_keys[PIECEWISE] == {BatchDescriptor(s) for s in SIZES}
    # ...while decode graphs sit on them rounded up to multiples of q (1 becomes 2), and 32 > q * max_num_reqs = 16.
    assert d.cudagraph_keys[FULL] == {decode(s, q=2) for s in (2, 4, 8, 16)}
    assert BatchDescriptor(4, 2, uniform_decode=True) in d.cudagraph_keys[FULL]


def test_uniform_keys_skip_sizes_not_divisible_by_q_len():
    d = make("FULL_DECODE_ONLY", q=3, capture_sizes=[3, 4, 6, 8, 9])
    assert d.cudagraph_keys[FULL] == {decode(s, q=3) for s in (3, 6, 9)}
    assert d.cudagraph_keys[PIECEWISE] == set()


def test_uniform_keys_unbounded_without_max_num_reqs():
    d = make("FULL_DECODE_ONLY")
    assert {k.num_tokens for k in d.cudagraph_keys[FULL]} == set(SIZES)


def test_mode_none_initialises_without_keys():
    d = make("NONE")
    assert d.keys_initialized
    assert d.cudagraph_keys == {PIECEWISE: set(), FULL: set()}
    assert d.dispatch(BatchDescriptor(4)) == (NONE, None)


def test_seq_len_bucket_keys():
    d = make("FULL", capture_sizes=[4, 8], seq_len_buckets=[128, 512])
    assert d.cudagraph_keys[FULL] == {
        BatchDescriptor(n, seq_len=b) for n in (4, 8) for b in (None, 128, 512)
    }


@pytest.mark.parametrize("mode", [NONE, CUDAGraphMode.FULL_AND_PIECEWISE, CUDAGraphMode.FULL_DECODE_ONLY])
def test_add_cudagraph_key_only_runtime_graph_modes(mode):
    d = make("FULL", init=False)
    with pytest.raises(ValueError, match=mode.name):
        d.add_cudagraph_key(mode, BatchDescriptor(4))
    d.add_cudagraph_key(PIECEWISE, BatchDescriptor(4))
    assert d.cudagraph_keys == {PIECEWISE: {BatchDescriptor(4)}, FULL: set()}


# -- dispatch, case by case -------------------------------------------------------------------


def test_not_initialised_dispatches_none():
    d = make("FULL", init=False)
    assert not d.keys_initialized
    assert d.dispatch(BatchDescriptor(4)) == (NONE, None)


def test_full_mode_pads_to_the_capture_size():
    d = make("FULL")
    assert d.dispatch(BatchDescriptor(3)) == (FULL, BatchDescriptor(4))
    assert d.dispatch(BatchDescriptor(8)) == (FULL, BatchDescriptor(8))
    assert d.dispatch(BatchDescriptor(17)) == (FULL, BatchDescriptor(32))


def test_full_mode_serves_uniform_batches_with_the_relaxed_key():
    d = make("FULL", q=1)
    assert d.dispatch(decode(5)) == (FULL, BatchDescriptor(8))


def test_piecewise_mode():
    d = make("PIECEWISE")
    assert d.dispatch(BatchDescriptor(5, num_reqs=2)) == (PIECEWISE, BatchDescriptor(8))
    assert d.dispatch(decode(5)) == (PIECEWISE, BatchDescriptor(8))


def test_full_and_piecewise_uniform_decode_is_full_with_num_reqs():
    d = make("FULL_AND_PIECEWISE", q=2)
    # 3 requests x 2 tokens = 6 tokens, padded to 8 tokens = 4 requests.
    assert d.dispatch(BatchDescriptor(6, 3, uniform_decode=True)) == (FULL, BatchDescriptor(8, 4, True))


def test_full_and_piecewise_mixed_batch_is_piecewise_relaxed():
    d = make("FULL_AND_PIECEWISE", q=2)
    assert d.dispatch(BatchDescriptor(6, 3)) == (PIECEWISE, BatchDescriptor(8))


def test_full_and_piecewise_decode_above_max_num_reqs_is_piecewise():
    d = make("FULL_AND_PIECEWISE", q=1, max_num_reqs=8)
    assert d.dispatch(decode(12)) == (PIECEWISE, BatchDescriptor(16))
    assert d.dispatch(decode(7)) == (FULL, decode(8))


def test_full_decode_only():
    d = make("FULL_DECODE_ONLY", q=1)
    assert d.dispatch(decode(3)) == (FULL, decode(4))
    assert d.dispatch(BatchDescriptor(3)) == (NONE, None)
    assert d.dispatch(BatchDescriptor(3, num_reqs=2)) == (NONE, None)


def test_cascade_attention_disables_full_and_falls_to_piecewise():
    d = make("FULL_AND_PIECEWISE", q=1)
    batch = decode(4)
    assert d.dispatch(batch) == (FULL, batch)
    assert d.dispatch(batch, use_cascade_attn=True) == (PIECEWISE, BatchDescriptor(4))
    assert make("FULL").dispatch(BatchDescriptor(4), use_cascade_attn=True) == (NONE, None)
    assert make("FULL_DECODE_ONLY").dispatch(batch, use_cascade_attn=True) == (NONE, None)


def test_above_largest_capture_size_is_none_and_counted():
    d = make("FULL")
    assert d.dispatch(BatchDescriptor(33)) == (NONE, None)
    assert d.dispatch(BatchDescriptor(32)) == (FULL, BatchDescriptor(32))
    assert d.dispatch_stats.above_largest == 1
    assert d.stats()["above_largest"] == 1


def test_seq_len_padded_to_its_bucket():
    d = make("FULL", capture_sizes=[4, 8], seq_len_buckets=[128, 512])
    assert d.dispatch(BatchDescriptor(3, seq_len=100)) == (FULL, BatchDescriptor(4, seq_len=128))
    assert d.dispatch(BatchDescriptor(5, seq_len=129)) == (FULL, BatchDescriptor(8, seq_len=512))
    assert d.dispatch(BatchDescriptor(3)) == (FULL, BatchDescriptor(4))
    assert d.dispatch(BatchDescriptor(3, seq_len=513)) == (NONE, None)
    assert d.dispatch_stats.above_largest == 1


def test_seq_len_is_not_a_key_axis_without_buckets():
    d = make("FULL")
    assert d.dispatch(BatchDescriptor(3, seq_len=1000)) == (FULL, BatchDescriptor(4))


def test_uniform_decode_with_seq_len_bucket():
    d = make("FULL_DECODE_ONLY", capture_sizes=[4, 8], seq_len_buckets=[64])
    assert d.dispatch(decode(3, seq_len=10)) == (FULL, decode(4, seq_len=64))


def test_token_limits_bound_the_real_batch_size():
    d = make("FULL", min_tokens_for_graph=4, max_tokens_for_graph=12)
    assert d.dispatch(BatchDescriptor(2)) == (NONE, None)
    # 3 would pad to the 4-row graph, but the limits bound the real batch: eager.
    assert d.dispatch(BatchDescriptor(3)) == (NONE, None)
    assert d.dispatch(BatchDescriptor(4)) == (FULL, BatchDescriptor(4))
    # 12 replays the 16-row graph although 16 is above max_tokens_for_graph; 13 runs eagerly.
    assert d.dispatch(BatchDescriptor(12)) == (FULL, BatchDescriptor(16))
    assert d.dispatch(BatchDescriptor(13)) == (NONE, None)
    assert d.decide(BatchDescriptor(13)).detail == "batch of 13 is above max_tokens_for_graph=12"


def test_prefer_piecewise_switches_when_both_exist():
    d = make("FULL_AND_PIECEWISE", prefer_piecewise=True)
    assert d.dispatch(decode(4)) == (PIECEWISE, BatchDescriptor(4))
    d = make("FULL_DECODE_ONLY", prefer_piecewise=True)
    assert d.dispatch(decode(4)) == (FULL, decode(4))


def test_explicit_policy_overrides_config():
    d = make("FULL", min_tokens_for_graph=8, policy=DefaultDispatchPolicy())
    assert d.dispatch(BatchDescriptor(2)) == (FULL, BatchDescriptor(2))


def test_adaptive_policy_through_the_dispatcher():
    d = make("FULL", policy=AdaptiveDispatchPolicy(min_samples=2))
    batch = BatchDescriptor(3)
    assert d.dispatch(batch) == (FULL, BatchDescriptor(4))
    for latency in (1.0, 1.0):
        d.record_latency(batch, NONE, latency)
        d.record_latency(BatchDescriptor(4), FULL, 2 * latency)  # the same padded key
    assert d.dispatch(batch) == (NONE, None)
    assert d.dispatch(BatchDescriptor(8)) == (FULL, BatchDescriptor(8))


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 600), min_size=1, max_size=20, unique=True),
    n=st.integers(1, 700),
    mode=st.sampled_from(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE"]),
)
def test_padding_is_to_the_smallest_capture_size(sizes, n, mode):
    d = make(mode, capture_sizes=sizes)
    got_mode, got = d.dispatch(BatchDescriptor(n))
    fitting = [s for s in sizes if s >= n]
    if not fitting:
        assert (got_mode, got) == (NONE, None)
        return
    assert got_mode in (FULL, PIECEWISE)
    assert got.num_tokens >= n
    assert got.num_tokens == min(fitting)
    assert got in d.cudagraph_keys[got_mode]


@settings(max_examples=200, deadline=None)
@given(
    reqs=st.integers(1, 64),
    q=st.integers(1, 4),
    max_num_reqs=st.one_of(st.none(), st.integers(1, 64)),
    cascade=st.booleans(),
)
def test_uniform_decode_dispatch_is_consistent(reqs, q, max_num_reqs, cascade):
    d = make("FULL_AND_PIECEWISE", q=q, capture_sizes=list(range(1, 257)), max_num_reqs=max_num_reqs)
    mode, got = d.dispatch(BatchDescriptor(reqs * q, reqs, uniform_decode=True), use_cascade_attn=cascade)
    assert got is not None and got.num_tokens == reqs * q  # every size is captured: no padding
    in_decode_range = max_num_reqs is None or reqs <= max_num_reqs
    if in_decode_range and not cascade:
        assert (mode, got) == (FULL, BatchDescriptor(reqs * q, reqs, uniform_decode=True))
    else:
        assert (mode, got) == (PIECEWISE, BatchDescriptor(reqs * q))


# -- uniform decode with a query length above 1 (issue 21, item 2) -------------------------------


def spec(mode="FULL_AND_PIECEWISE", q=3, **config):
    """A dispatcher on the default sizes (as vLLM's tests use them) with query length ``q``."""
    cfg = CUDAGraphConfig(mode=mode, uniform_decode_query_len=q, **config)
    dispatcher = CudagraphDispatcher(cfg)
    dispatcher.initialize_cudagraph_keys(cfg.mode, q)
    return dispatcher


def test_speculative_decode_batches_replay_full_graphs():
    """Regression (issue 21, item 2): with query length 3 cupygraph only had decode keys for sizes
    already divisible by 3, so both batches below went to PIECEWISE at 16."""
    d = spec()
    assert d.dispatch(BatchDescriptor(12, 4, uniform_decode=True)) == (FULL, BatchDescriptor(18, 6, True))
    # An exact match is not over-padded.
    assert d.dispatch(BatchDescriptor(9, 3, uniform_decode=True)) == (FULL, BatchDescriptor(9, 3, True))
    # Mixed batches keep the capture sizes as given (issue 33): 16, not the decode graph's 18.
    assert d.dispatch(BatchDescriptor(12, 2)) == (PIECEWISE, BatchDescriptor(16))


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
@pytest.mark.parametrize("q", [2, 3, 4, 5])
def test_every_uniform_decode_batch_within_the_limits_is_full(mode, q):
    d = spec(mode, q, max_num_reqs=64)
    sizes = d.config.cudagraph_capture_sizes
    decode_sizes = sorted({-(-s // q) * q for s in sizes} & set(range(1, min(sizes[-1], 64 * q) + 1)))
    assert d.keys.decode_sizes == tuple(decode_sizes) and all(s % q == 0 for s in decode_sizes)
    assert d.cudagraph_keys[FULL] == {BatchDescriptor(s, s // q, True) for s in decode_sizes}
    for reqs in range(1, 65):
        n = reqs * q
        mode_got, key = d.dispatch(BatchDescriptor(n, reqs, uniform_decode=True))
        padded = min(s for s in decode_sizes if s >= n)
        assert (mode_got, key) == (FULL, BatchDescriptor(padded, padded // q, True)), n
        if n in decode_sizes:
            assert key.num_tokens == n  # exact matches are not over-padded


def test_decode_batches_above_the_request_limit_are_not_full():
    # Sizes up to min(2 x 4 x 3, 512) = 24: 1, 2, 4, 8, 16, 24; decode graphs on them rounded up to
    # multiples of 3 and at most 4 x 3 = 12 tokens: 3, 6, 9.
    d = spec("FULL_AND_PIECEWISE", 3, max_num_reqs=4)
    assert d.config.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 24) and d.keys.decode_sizes == (3, 6, 9)
    assert d.dispatch(BatchDescriptor(9, 3, True)) == (FULL, BatchDescriptor(9, 3, True))
    # 12 tokens would pad to 18 = 6 requests, more than max_num_reqs: no FULL key (as in vLLM,
    # whose decode keys stop at max_num_seqs x query length too); PIECEWISE on its own sizes.
    assert d.dispatch(BatchDescriptor(12, 4, True)) == (PIECEWISE, BatchDescriptor(16))
    assert d.dispatch(BatchDescriptor(15, 5, True)) == (PIECEWISE, BatchDescriptor(16))
    only = spec("FULL_DECODE_ONLY", 3, max_num_reqs=4)
    assert only.dispatch(BatchDescriptor(15, 5, True)) == (NONE, None)


def test_decode_keys_follow_the_query_length_the_keys_are_made_for():
    """initialize_cudagraph_keys(mode, q) may name another query length than the config's (vLLM's
    signature): the decode keys are still rounded to it."""
    cfg = CUDAGraphConfig(mode="FULL_AND_PIECEWISE")  # query length 1: sizes 1, 2, 4, 8, 16, ...
    d = CudagraphDispatcher(cfg)
    d.initialize_cudagraph_keys(cfg.mode, 3)
    assert d.dispatch(BatchDescriptor(12, 4, True)) == (FULL, BatchDescriptor(18, 6, True))
    assert d.dispatch(BatchDescriptor(9, 3, True)) == (FULL, BatchDescriptor(9, 3, True))
    assert d.dispatch(BatchDescriptor(12, 2)) == (PIECEWISE, BatchDescriptor(16))  # mixed: the config's sizes


def test_speculative_decode_end_to_end_on_the_host_backend(monkeypatch):
    """A jit with query length 3: a 12-token decode step is captured and replayed as one FULL graph
    of 18 rows, and its result is the eager one."""
    from cupygraph import jit

    monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    f = jit(lambda x: x * 2 + 1, config=dict(backend="host", mode="FULL_AND_PIECEWISE", uniform_decode_query_len=3))
    rng = np.random.default_rng(0)
    for _ in range(2):
        x = rng.standard_normal((12, 4))
        out = f.call_with_descriptor(BatchDescriptor(12, 4, uniform_decode=True), x)
        assert np.array_equal(out, x * 2 + 1)
    (entry,) = f.registry.entries()
    assert entry.key.mode is FULL and entry.key.descriptor == BatchDescriptor(18, 6, True)
    assert f.stats().hits == 1


# -- stats -----------------------------------------------------------------------------------


def test_stats_count_modes_padding_and_graph_ratio():
    d = make("FULL_AND_PIECEWISE")
    d.dispatch(decode(4))  # FULL, exact
    d.dispatch(BatchDescriptor(3))  # PIECEWISE, padded
    d.dispatch(BatchDescriptor(100))  # NONE, above largest
    d.dispatch(BatchDescriptor(5, 5))  # PIECEWISE, padded
    s = d.dispatch_stats
    assert (s.total, s.full, s.piecewise, s.none, s.padded, s.above_largest) == (4, 1, 2, 1, 2, 1)
    assert s.graph_ratio() == pytest.approx(0.75)
    stats = d.stats()
    assert stats["graph_ratio"] == pytest.approx(0.75)
    assert stats["hits"] == 0 and "hit_rate" in stats  # registry counters are merged in
    assert stats["num_keys"]["FULL"] == len(SIZES)


def test_graph_ratio_empty_is_zero():
    assert DispatchStats().graph_ratio() == 0.0


def test_dispatch_is_thread_safe():
    d = make("FULL")

    def worker():
        for n in range(1, 40):
            d.dispatch(BatchDescriptor(n))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    s = d.dispatch_stats
    assert s.total == 8 * 39
    assert (s.full, s.none, s.above_largest) == (8 * 32, 8 * 7, 8 * 7)


# -- the seed's surface -------------------------------------------------------------------------


def test_register_graph_makes_the_key_dispatchable():
    d = make("PIECEWISE")
    key = BatchDescriptor(8)
    assert not d.has_graph(key)
    graph = object()
    d.register_graph(key, graph, [0x1000, 0x2000])
    assert d.has_graph(key)
    assert d.get_graph(key) is graph
    assert d.get_input_ptrs(key) == (0x1000, 0x2000)
    assert d.dispatch(BatchDescriptor(7)) == (FULL, key)
    assert d.stats()["registered_graphs"] == 1
    d.clear_cache()
    assert not d.has_graph(key) and d.get_graph(key) is None
    assert d.dispatch(BatchDescriptor(7)) == (PIECEWISE, key)


def test_clear_cache_keeps_initialised_keys():
    d = make("FULL")
    d.register_graph(BatchDescriptor(8), object(), ())
    d.clear_cache()
    assert BatchDescriptor(8) in d.cudagraph_keys[FULL]


def test_registry_entries_are_graphs_too():
    from cupygraph.cache import CUDAGraphRegistry, GraphKey

    cfg = CUDAGraphConfig(capture_sizes=SIZES, backend="host")
    registry = CUDAGraphRegistry(cfg)
    d = CudagraphDispatcher(cfg, registry=registry)
    assert d.registry is registry
    entry = registry.capture_entry(GraphKey(BatchDescriptor(8)), lambda x: x * 2, [np.ones((5, 3), np.float32)])
    assert d.has_graph(BatchDescriptor(8))
    assert d.get_graph(BatchDescriptor(8)) is entry
    d.clear_cache()
    assert len(registry) == 0 and not d.has_graph(BatchDescriptor(8))


def test_registry_is_created_lazily():
    d = make("FULL", backend="host")
    assert d._registry is None
    d.stats()
    d.has_graph(BatchDescriptor(4))
    assert d._registry is None
    assert d.registry is d.registry
    assert d.registry.config is d.config


def test_enable_and_disable_mode():
    d = make("FULL_AND_PIECEWISE")
    d.disable_mode(PIECEWISE)
    assert d.cudagraph_keys[PIECEWISE] == set() and d.cudagraph_keys[FULL]
    assert d.dispatch(BatchDescriptor(3)) == (NONE, None)
    assert d.dispatch(decode(3)) == (FULL, decode(4))
    d.enable_mode(PIECEWISE)
    assert d.cudagraph_keys[FULL] == set()
    assert d.dispatch(decode(3)) == (PIECEWISE, BatchDescriptor(4))
    d.enable_mode("full_and_piecewise")
    assert d.dispatch(decode(3)) == (FULL, decode(4))
    d.disable_mode(CUDAGraphMode.FULL_AND_PIECEWISE)
    assert d.cudagraph_keys == {PIECEWISE: set(), FULL: set()}


def test_enable_mode_keeps_registered_graphs():
    d = make("PIECEWISE", capture_sizes=[4, 8])
    extra = BatchDescriptor(64)
    d.register_graph(extra, object(), ())
    d.enable_mode(PIECEWISE)
    assert d.dispatch(BatchDescriptor(64)) == (NONE, None)  # above the largest capture size
    assert extra in d.cudagraph_keys[FULL]
    d.clear_cache()
    assert extra not in d.cudagraph_keys[FULL]


# -- composite ---------------------------------------------------------------------------------


def test_composite_asks_by_descending_priority():
    composite = CompositeDispatcher()
    composite.add_dispatcher("piecewise", make("PIECEWISE"), priority=1)
    composite.add_dispatcher("full", make("FULL"), priority=5)
    assert composite.dispatcher_names == ["full", "piecewise"]
    decision = composite.dispatch(BatchDescriptor(3))
    assert isinstance(decision, CompositeDecision)
    assert (decision.mode, decision.descriptor, decision.dispatcher_name) == (FULL, BatchDescriptor(4), "full")
    _mode, _descriptor, name = decision
    assert name == "full" and decision.asked == ("full",)


def test_composite_falls_back_down_the_chain():
    composite = CompositeDispatcher()
    composite.add_dispatcher("decode", make("FULL_DECODE_ONLY"), priority=2)
    composite.add_dispatcher("small", make("PIECEWISE", capture_sizes=[4, 8]), priority=1)
    composite.add_dispatcher("big", make("PIECEWISE", capture_sizes=[64, 128]), priority=0)
    assert composite.dispatch(decode(3)).dispatcher_name == "decode"
    assert tuple(composite.dispatch(BatchDescriptor(3))) == (PIECEWISE, BatchDescriptor(4), "small")
    decision = composite.dispatch(BatchDescriptor(100))
    assert (decision.dispatcher_name, decision.descriptor) == ("big", BatchDescriptor(128))
    assert decision.asked == ("decode", "small", "big")
    none = composite.dispatch(BatchDescriptor(500))
    assert tuple(none) == (NONE, None, None)
    assert none.asked == ("decode", "small", "big")


def test_composite_passes_cascade_and_equal_priority_keeps_order():
    composite = CompositeDispatcher()
    composite.add_dispatcher("a", make("FULL"))
    composite.add_dispatcher("b", make("PIECEWISE"))
    assert composite.dispatch(BatchDescriptor(2)).dispatcher_name == "a"
    assert composite.dispatch(BatchDescriptor(2), use_cascade_attn=True).dispatcher_name == "b"


def test_composite_remove_and_duplicates():
    composite = CompositeDispatcher()
    composite.add_dispatcher("full", make("FULL"), priority=1)
    composite.add_dispatcher("piecewise", make("PIECEWISE"))
    with pytest.raises(ValueError, match="full"):
        composite.add_dispatcher("full", make("FULL"))
    composite.remove_dispatcher("full")
    assert composite.dispatch(BatchDescriptor(3)).dispatcher_name == "piecewise"
    with pytest.raises(KeyError, match="nope"):
        composite.remove_dispatcher("nope")
    with pytest.raises(TypeError, match="dispatch"):
        composite.add_dispatcher("bad", object())


def test_composite_nests():
    inner = CompositeDispatcher()
    inner.add_dispatcher("full", make("FULL"))
    outer = CompositeDispatcher()
    outer.add_dispatcher("none", make("NONE"), priority=1)
    outer.add_dispatcher("inner", inner)
    assert tuple(outer.dispatch(BatchDescriptor(3))) == (FULL, BatchDescriptor(4), "inner")
