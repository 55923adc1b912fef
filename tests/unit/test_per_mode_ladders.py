"""Issue 33: under speculative decoding each runtime mode keeps its own capture ladder, as vLLM does.

vLLM's tests in tests/v1/worker/gpu/test_cudagraph_utils.py (its GPU model runner's candidate
lists), restated for cupygraph with vLLM's numbers: capture sizes [1, 2, 4, 8, 16, 24], query
length 3, max_num_seqs 8 (``max_num_reqs`` here), mode FULL_AND_PIECEWISE. FULL uniform-decode
graphs sit on the sizes rounded up to multiples of 3 (3, 6, 9, 18, 24); PIECEWISE keeps 1, 2, 4,
8, 16, 24. Before the fix cupygraph rounded the capture sizes themselves, so a mixed batch of 12
tokens padded to 18 instead of 16.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg
from cupygraph import BatchDescriptor
from cupygraph import CUDAGraphMode as Mode

NONE, PIECEWISE, FULL = Mode.NONE, Mode.PIECEWISE, Mode.FULL
DECODE_QUERY_LEN = 3
VLLM_SIZES = [1, 2, 4, 8, 16, 24]


def config(q: int = DECODE_QUERY_LEN, sizes: list[int] = VLLM_SIZES, **fields: object) -> cg.CUDAGraphConfig:
    fields.setdefault("max_num_reqs", 8)
    return cg.CUDAGraphConfig(mode="FULL_AND_PIECEWISE", capture_sizes=sizes, uniform_decode_query_len=q, **fields)


def spec_decode_dispatcher(q: int = DECODE_QUERY_LEN, sizes: list[int] = VLLM_SIZES,
                           **fields: object) -> cg.CudagraphDispatcher:
    cfg = config(q, sizes, **fields)
    dispatcher = cg.CudagraphDispatcher(cfg)
    dispatcher.initialize_cudagraph_keys(cfg.mode, q)
    return dispatcher


def uniform(num_reqs: int, q: int = DECODE_QUERY_LEN) -> BatchDescriptor:
    return BatchDescriptor(num_reqs * q, num_reqs, uniform_decode=True)


def test_each_mode_builds_its_own_ladder():
    from cupygraph.dispatch.decision import capture_ladders

    d = spec_decode_dispatcher()
    assert d.keys.ladders() == {PIECEWISE: (1, 2, 4, 8, 16, 24), FULL: (3, 6, 9, 18, 24)}
    assert d.cudagraph_keys[PIECEWISE] == {BatchDescriptor(s) for s in VLLM_SIZES}
    assert d.cudagraph_keys[FULL] == {BatchDescriptor(s, s // 3, True) for s in (3, 6, 9, 18, 24)}
    # The config lists the sizes as given; the decision answers for it with the same ladders.
    assert d.config.cudagraph_capture_sizes == tuple(VLLM_SIZES)
    assert capture_ladders(d.config) == d.keys.ladders()


def test_uniform_decode_pads_up_to_full_graph():
    d = spec_decode_dispatcher()
    assert d.dispatch(uniform(4)) == (FULL, BatchDescriptor(18, 6, uniform_decode=True))
    # vLLM's candidates for 12 tokens are FULL 18, then PIECEWISE 16: with FULL ruled out (cascade
    # attention) or a policy that prefers PIECEWISE, the batch replays PIECEWISE at 16, not 18.
    assert d.dispatch(uniform(4), use_cascade_attn=True) == (PIECEWISE, BatchDescriptor(16))
    prefer = spec_decode_dispatcher(prefer_piecewise=True)
    assert prefer.dispatch(uniform(4)) == (PIECEWISE, BatchDescriptor(16))
    assert prefer.config.get_padded_batch_size(12, num_reqs=4, uniform_decode=True) == 16


def test_uniform_decode_exact_match_is_not_over_padded():
    d = spec_decode_dispatcher()
    assert d.dispatch(uniform(3)) == (FULL, BatchDescriptor(9, 3, uniform_decode=True))


def test_mixed_batch_never_selects_a_uniform_decode_graph():
    d = spec_decode_dispatcher()
    mode, descriptor = d.dispatch(BatchDescriptor(12, 2))
    assert (mode, descriptor) == (PIECEWISE, BatchDescriptor(16))
    assert descriptor is not None and not descriptor.uniform_decode
    # Every front door that pads by the config agrees: 16.
    assert d.config.get_padded_batch_size(12) == 16 == d.config.get_padded_batch_size(12, num_reqs=2)
    assert cg.CUDAGraphManager(d.config).get_mode_for_batch(12) is PIECEWISE
    key = cg.CUDAGraphRegistry(d.config).make_key(12)
    assert key is not None and key.descriptor == BatchDescriptor(16)


def test_mixed_batch_at_decode_only_token_count_still_gets_a_graph():
    """Token counts only the FULL decode ladder has (3, 6, 9, 18) still reach a PIECEWISE graph."""
    d = spec_decode_dispatcher()
    sizes = {mode: {key.num_tokens for key in keys} for mode, keys in d.cudagraph_keys.items()}
    decode_only = sorted(sizes[FULL] - sizes[PIECEWISE])
    assert decode_only == [3, 6, 9, 18]  # the premise: without such counts this test covers nothing
    for num_tokens in decode_only:
        mode, descriptor = d.dispatch(BatchDescriptor(num_tokens, 1))
        assert mode is PIECEWISE, num_tokens
        assert descriptor is not None and not descriptor.uniform_decode, num_tokens
        assert descriptor.num_tokens >= num_tokens and descriptor.num_tokens in VLLM_SIZES, num_tokens


def test_uniform_decode_beyond_capture_ladder_falls_back():
    d = spec_decode_dispatcher()
    assert d.dispatch(uniform(9)) == (NONE, None)  # 27 tokens: above every ladder


@pytest.mark.parametrize("q, sizes", [(1, [1, 2, 4, 8]), (2, [2, 4, 8, 16]), (8, [8, 16, 32, 64])])
def test_divisor_query_len_dispatch_is_unchanged(q, sizes):
    """Where the query length divides every capture size, both ladders are the capture sizes."""
    d = spec_decode_dispatcher(q, sizes)
    assert {key.num_tokens for keys in d.cudagraph_keys.values() for key in keys} == set(sizes)
    for num_reqs in range(1, sizes[-1] // q + 1):
        num_tokens = num_reqs * q
        expected = min(s for s in sizes if s >= num_tokens)
        assert d.dispatch(uniform(num_reqs, q)) == (FULL, BatchDescriptor(expected, expected // q, True)), num_tokens
        assert d.dispatch(BatchDescriptor(num_tokens, num_reqs)) == (PIECEWISE, BatchDescriptor(expected))


def test_the_decode_ladder_stops_at_max_num_reqs_requests():
    """vLLM's cap: a decode graph holds at most max_num_reqs requests of the query length."""
    d = spec_decode_dispatcher(sizes=[1, 2, 4, 8, 16, 24, 48], max_num_reqs=None)
    assert d.keys.decode_sizes == (3, 6, 9, 18, 24, 48)
    capped = cg.CudagraphDispatcher(config(sizes=[1, 2, 4, 8, 16, 24, 48]))  # max_num_reqs 8: 24 tokens
    capped.initialize_cudagraph_keys(capped.config.mode, 3)
    assert capped.keys.decode_sizes == (3, 6, 9, 18, 24)
    assert capped.dispatch(uniform(10)) == (PIECEWISE, BatchDescriptor(48))


def test_jit_replays_each_batch_on_its_own_ladder(monkeypatch):
    """End to end on the host backend: the decode step and the mixed batch of 12 tokens are captured
    at 18 (FULL) and 16 (PIECEWISE), and both give the eager result."""
    monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    f = cg.jit(lambda x: x * 2 + 1, config=config(backend="host"))
    x = np.random.default_rng(0).standard_normal((12, 4))
    assert np.array_equal(f.call_with_descriptor(uniform(4), x), x * 2 + 1)
    assert np.array_equal(f.call_with_descriptor(BatchDescriptor(12, 2), x), x * 2 + 1)
    held = {(e.key.mode, e.key.descriptor) for e in f.registry.entries()}
    assert held == {(FULL, BatchDescriptor(18, 6, True)), (PIECEWISE, BatchDescriptor(16))}
