"""Every front door gives a batch the same verdict (graphed or eager) and the same padded size.

Random configs (explicit sizes or a largest size, modes, token limits, seq_len buckets, request
limits, query lengths) and random batches; on the host backend, whose replay runs the function on
the graph's static buffers, so the rows a call hands the function tell the padded size it ran at.
Asked: the config, the dispatcher (the reference: ``dispatch``), the registry's batch-size API,
the manager (``get_mode_for_batch`` and what ``execute_or_capture`` does), ``CUDAGraphWrapper``
driven through ``cudagraph_context`` with the dispatcher's decision, and ``jit``
(``call_with_descriptor``).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import cupygraph as cg
from cupygraph import BatchDescriptor, CUDAGraphMode

NONE = CUDAGraphMode.NONE
# NONE once: it decides every batch the same way.
MODES = ["NONE", "FULL", "FULL", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE"]


@st.composite
def configs(draw: Any) -> cg.CUDAGraphConfig:
    fields: dict[str, Any] = {"backend": "host", "mode": draw(st.sampled_from(MODES))}
    sizes = draw(st.sampled_from(["explicit", "largest", "default"]))
    if sizes == "explicit":
        fields["capture_sizes"] = draw(st.lists(st.integers(1, 48), min_size=1, max_size=8, unique=True))
    elif sizes == "largest":
        fields["max_capture_size"] = draw(st.integers(1, 64))
    fields["max_num_reqs"] = draw(st.one_of(st.none(), st.integers(1, 24)))
    fields["uniform_decode_query_len"] = draw(st.integers(1, 4))
    fields["min_tokens_for_graph"] = low = draw(st.sampled_from([1, 1, 1, 2, 3, 5]))
    fields["max_tokens_for_graph"] = draw(st.one_of(st.none(), st.none(), st.integers(low, 40)))
    fields["seq_len_buckets"] = draw(st.one_of(st.none(), st.lists(st.integers(1, 110), min_size=1, max_size=3)))
    try:
        return cg.CUDAGraphConfig(**fields)
    except cg.ConfigError:
        assume(False)  # a combination the config refuses (min_tokens above the largest size, ...)
        raise


@st.composite
def batches(draw: Any, config: cg.CUDAGraphConfig) -> BatchDescriptor:
    q = config.uniform_decode_query_len
    largest = config.largest_capture_size or 8
    if draw(st.booleans()):  # uniform decode: whole requests, now and then a ragged one
        reqs = draw(st.integers(1, max(1, (largest + 4) // q)))
        num_tokens = reqs * q + draw(st.sampled_from([0, 0, 0, 1]))
        return BatchDescriptor(num_tokens, reqs, uniform_decode=True, seq_len=draw(seq_lens()))
    num_tokens = draw(st.integers(1, largest + 4))
    reqs = draw(st.one_of(st.none(), st.integers(1, num_tokens)))
    return BatchDescriptor(num_tokens, reqs, seq_len=draw(seq_lens()))


def seq_lens() -> st.SearchStrategy[Optional[int]]:
    return st.one_of(st.none(), st.integers(1, 100))


class Rows:
    """A function that remembers how many rows it was last called with (the padded size on replay)."""

    def __init__(self) -> None:
        self.rows: Optional[int] = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.rows = x.shape[0]
        return x * 2.0 + 1.0


def expected(decision: tuple[CUDAGraphMode, Optional[BatchDescriptor]], n: int) -> tuple[bool, int]:
    """(graphed, the rows the function sees) for a dispatcher decision on a batch of ``n`` rows."""
    _, descriptor = decision
    return (False, n) if descriptor is None else (True, descriptor.num_tokens)


def run_counted(stats: Any, call: Any) -> bool:
    """Run ``call``; True when it replayed a graph (captured or not), False when it ran eagerly.
    ``stats()`` reads the statistics (each read is a new object)."""
    before = stats()
    graphed_before, eager_before = before.hits + before.captures, before.fallbacks
    call()
    after = stats()
    graphed = after.hits + after.captures - graphed_before
    eager = after.fallbacks - eager_before
    assert graphed + eager == 1, (graphed, eager)
    return graphed == 1


def what_jit_did(config: cg.CUDAGraphConfig, batch: BatchDescriptor, x: np.ndarray) -> tuple[bool, int]:
    fn = Rows()
    f = cg.jit(fn, config=config)
    out: list[Any] = []
    graphed = run_counted(f.stats, lambda: out.append(f.call_with_descriptor(batch, x)))
    np.testing.assert_array_equal(out[0], x * 2.0 + 1.0)
    assert fn.rows is not None
    return graphed, fn.rows


def what_the_manager_did(
    manager: cg.CUDAGraphManager, n: int, seq_len: Optional[int], x: np.ndarray
) -> tuple[bool, int]:
    fn = Rows()
    out: list[Any] = []
    graphed = run_counted(manager.stats, lambda: out.append(manager.execute_or_capture(n, seq_len, fn, [x])))
    np.testing.assert_array_equal(out[0], x * 2.0 + 1.0)
    assert fn.rows is not None
    return graphed, fn.rows


def what_the_wrappers_did(decision: tuple[CUDAGraphMode, Optional[BatchDescriptor]], n: int) -> tuple[bool, int]:
    """Drive a FULL and a PIECEWISE wrapper through the forward context the decision fills, as vLLM's
    model runner does; the caller hands them its persistent buffer of the padded size."""
    mode, descriptor = decision
    rows = n if descriptor is None else descriptor.num_tokens
    buffer = np.ones((rows, 3))
    fn = Rows()
    wrappers = {
        m: cg.CUDAGraphWrapper(fn, m, backend=cg.HostBackend()) for m in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE)
    }
    with cg.cudagraph_context(mode, descriptor):
        for wrapper in wrappers.values():
            wrapper(buffer)
    held = {m: w.get_cached_descriptors() for m, w in wrappers.items()}
    graphed = any(held.values())
    for m, descriptors in held.items():
        assert descriptors == ([descriptor] if m is mode else []), (m, descriptors)
    return graphed, fn.rows if fn.rows is not None else rows


@pytest.fixture(autouse=True)
def _graphs_enabled() -> None:
    if cg.graphs_disabled_by_env():
        pytest.skip("CUPYGRAPH_DISABLE makes every front door eager; the agreement is checked with graphs on")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), config=configs())
def test_front_doors_agree_on_graphed_or_eager_and_the_padded_size(data: Any, config: cg.CUDAGraphConfig) -> None:
    batch = data.draw(batches(config), label="batch")
    n, seq_len = batch.num_tokens, batch.seq_len
    dispatcher = cg.CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(config.mode, config.uniform_decode_query_len)
    decision = dispatcher.dispatch(batch)
    # The manager and the registry take no request count; execute_or_capture and the registry no
    # uniformity either: each is compared with the dispatcher's decision for what it is given.
    managed = BatchDescriptor(n, uniform_decode=batch.uniform_decode, seq_len=seq_len)
    plain = BatchDescriptor(n, seq_len=seq_len)
    by_manager, by_plain = dispatcher.dispatch(managed), dispatcher.dispatch(plain)
    graphed, padded = expected(decision, n)
    why = dispatcher.decide(batch, count=False).reason
    event(f"{decision[0].name}" + (f" ({why.value})" if why is not None else ""))
    x = np.random.default_rng(n).standard_normal((n, 3))

    # The config.
    assert config.should_use_cudagraph(n, seq_len, num_reqs=batch.num_reqs, uniform_decode=batch.uniform_decode) \
        is graphed
    if graphed:
        # A uniform-decode batch may sit on its own ladder (issue 33): the config is told what it is.
        assert config.get_padded_batch_size(n, num_reqs=batch.num_reqs, uniform_decode=batch.uniform_decode) == padded

    # The registry's batch-size API.
    key = cg.CUDAGraphRegistry(config).make_key(n, seq_len)
    assert (None if key is None else key.descriptor) == by_plain[1]

    # The manager: what it says, and what it does.
    manager = cg.CUDAGraphManager(config)
    assert manager.get_mode_for_batch(n, seq_len, uniform_decode=batch.uniform_decode) is by_manager[0]
    assert manager.get_mode_for_batch(n, seq_len) is by_plain[0]
    assert manager.should_capture(n, seq_len) is (by_plain[1] is not None)
    assert what_the_manager_did(manager, n, seq_len, x) == expected(by_plain, n)
    if by_plain[1] is not None:
        (entry,) = manager.registry.entries()
        assert (entry.key.descriptor, entry.key.mode) == (by_plain[1], by_plain[0])
        assert not manager.should_capture(n, seq_len)

    # The vLLM-style wrapper, told the decision through the forward context.
    assert what_the_wrappers_did(decision, n) == (graphed, padded)

    # jit, with the whole descriptor.
    assert what_jit_did(config, batch, x) == (graphed, padded)
