"""Issue 27: the public dispatch helpers check their arguments and raise a TypeError naming the
argument and what it accepts, never a raw AttributeError or TypeError from deep inside.

Regressions: ``CudagraphDispatcher.decide("4")`` and ``get_padded_key(8, 16)`` raised raw
AttributeErrors; the neighbours below crashed the same way, or took the wrong type silently.
"""

from __future__ import annotations

import pytest

import cupygraph as cg
from cupygraph import BatchDescriptor
from cupygraph import CUDAGraphMode as Mode
from cupygraph.dispatch.context import cudagraph_context, get_forward_context
from cupygraph.dispatch.decision import decide_for_config
from cupygraph.dispatch.dispatcher import CompositeDispatcher
from cupygraph.dispatch.policy import AdaptiveDispatchPolicy, DefaultDispatchPolicy

CONFIG = cg.CUDAGraphConfig(capture_sizes=[1, 2, 4, 8])
DESCRIPTOR = "must be a BatchDescriptor"


def dispatcher() -> cg.CudagraphDispatcher:
    d = cg.CudagraphDispatcher(CONFIG)
    d.initialize_cudagraph_keys(CONFIG.mode, 1)
    return d


def _decide(config, batch, keys, policy, cascade=False):
    return lambda: cg.decide(config, batch, keys, policy, cascade)


D = dispatcher()
CASES = {
    "decide": (lambda: D.decide("4"), f"batch_descriptor {DESCRIPTOR}.*got str '4'"),
    "dispatch": (lambda: D.dispatch(4), f"batch_descriptor {DESCRIPTOR}.*got int 4"),
    "dispatch cascade": (lambda: D.dispatch(BatchDescriptor(4), "yes"), "use_cascade_attn must be a bool"),
    "policy_key": (lambda: D.policy_key(4), f"batch_descriptor {DESCRIPTOR}"),
    "record_latency": (lambda: D.record_latency(4, Mode.FULL, 1.0), f"batch_descriptor {DESCRIPTOR}"),
    "add_cudagraph_key": (lambda: D.add_cudagraph_key(Mode.FULL, 4), f"batch_descriptor {DESCRIPTOR}"),
    "register_graph": (lambda: D.register_graph(4, object()), f"key {DESCRIPTOR}"),
    "has_graph": (lambda: D.has_graph("4"), f"key {DESCRIPTOR}"),
    "get_graph": (lambda: D.get_graph(4), f"key {DESCRIPTOR}"),
    "get_input_ptrs": (lambda: D.get_input_ptrs(4), f"key {DESCRIPTOR}"),
    "initialize_cudagraph_keys": (lambda: D.initialize_cudagraph_keys("FULL", "1"),
                                  "uniform_decode_query_len must be a positive integer, got str '1'"),
    "dispatcher config": (lambda: cg.CudagraphDispatcher({"mode": "FULL"}),
                          "config must be a CUDAGraphConfig .*from_dict.*got dict"),
    "dispatcher policy": (lambda: cg.CudagraphDispatcher(CONFIG, policy="adaptive"),
                          "policy must be a DispatchPolicy .*got str 'adaptive'"),
    "composite dispatch": (lambda: CompositeDispatcher().dispatch(4), f"key {DESCRIPTOR}"),
    "composite name": (lambda: CompositeDispatcher().add_dispatcher(1, D), "name must be a str, got int 1"),
    "composite priority": (lambda: CompositeDispatcher().add_dispatcher("a", D, "high"),
                           "priority must be an integer, got str 'high'"),
    "get_padded_key": (lambda: cg.get_padded_key(8, 16), f"key {DESCRIPTOR}.*got int 8"),
    "get_padded_key pad_to": (lambda: cg.get_padded_key(BatchDescriptor(8), "16"), "pad_to must be a positive integer"),
    "create_dispatch_key": (lambda: cg.create_dispatch_key(4, is_prefill="no"), "is_prefill must be a bool"),
    "get_cudagraph_sizes": (lambda: cg.get_cudagraph_sizes(8, None, None, Mode.FULL),
                            "capture_sizes must be a list of positive integers, got int 8"),
    "get_cudagraph_sizes str": (lambda: cg.get_cudagraph_sizes("1,2", None, None, Mode.FULL),
                                "capture_sizes must be a list of positive integers, got str"),
    "decide batch": (_decide(CONFIG, 4, D.keys, D.policy), f"batch {DESCRIPTOR}"),
    "decide config": (_decide({}, BatchDescriptor(4), D.keys, D.policy), "config must be a CUDAGraphConfig"),
    "decide keys": (_decide(CONFIG, BatchDescriptor(4), {}, D.policy), "keys must be DispatchKeys"),
    "decide policy": (_decide(CONFIG, BatchDescriptor(4), D.keys, None), "policy must be a DispatchPolicy"),
    "decide_for_config": (lambda: decide_for_config("cfg.yaml", BatchDescriptor(4)),
                          "config must be a CUDAGraphConfig"),
    "cudagraph_context": (lambda: cudagraph_context(Mode.FULL, 8).__enter__(), f"descriptor {DESCRIPTOR}"),
    "get_padded_batch_size": (lambda: CONFIG.get_padded_batch_size("4"), "batch_size must be a positive integer"),
    "get_padded_batch_size uniform": (lambda: CONFIG.get_padded_batch_size(4, uniform_decode="yes"),
                                      "uniform_decode must be a bool"),
    "get_padded_seq_len": (lambda: CONFIG.replace(seq_len_buckets=[64]).get_padded_seq_len("4"),
                           "seq_len must be a positive integer"),
    "prefer_piecewise": (lambda: DefaultDispatchPolicy(prefer_piecewise="no"), "prefer_piecewise must be a bool"),
    "from_config": (lambda: DefaultDispatchPolicy.from_config({}), "config must be a CUDAGraphConfig"),
    "select_mode key": (lambda: DefaultDispatchPolicy().select_mode(8, [Mode.FULL]), f"key {DESCRIPTOR}"),
    "select_mode modes": (lambda: DefaultDispatchPolicy().select_mode(BatchDescriptor(8), Mode.FULL),
                          "available_modes must be a list of runtime modes"),
    "adaptive select_mode": (lambda: AdaptiveDispatchPolicy().select_mode(BatchDescriptor(8), None),
                             "available_modes must be a list of runtime modes"),
    "should_use_graph": (lambda: AdaptiveDispatchPolicy().should_use_graph(8, True), f"key {DESCRIPTOR}"),
    "within_limits": (lambda: DefaultDispatchPolicy().within_limits(8), f"batch {DESCRIPTOR}"),
    "record": (lambda: AdaptiveDispatchPolicy().record(8, Mode.FULL, 1.0), f"key {DESCRIPTOR}"),
    "median_latency": (lambda: AdaptiveDispatchPolicy().median_latency(8, Mode.FULL), f"key {DESCRIPTOR}"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_wrong_argument_type_is_a_type_error_naming_it(name):
    call, message = CASES[name]
    with pytest.raises(TypeError, match=message):
        call()


def test_a_refused_key_changes_nothing():
    d = dispatcher()
    keys_before = {mode: set(keys) for mode, keys in d.cudagraph_keys.items()}
    for call in (lambda: d.add_cudagraph_key(Mode.FULL, 4), lambda: d.register_graph("4", object())):
        with pytest.raises(TypeError):
            call()
    assert d.cudagraph_keys == keys_before and d.dispatch_stats.total == 0
    policy = AdaptiveDispatchPolicy(min_samples=1)
    with pytest.raises(TypeError):
        policy.record(8, Mode.FULL, 1.0)  # would have been kept under a key no batch ever has
    assert policy.num_samples(BatchDescriptor(8), Mode.FULL) == 0
    with pytest.raises(TypeError):
        cudagraph_context(Mode.FULL, 8).__enter__()
    assert get_forward_context().mode is Mode.NONE  # nothing was pushed


def test_the_right_types_still_work():
    d = dispatcher()
    assert d.decide(BatchDescriptor(3)).padded == BatchDescriptor(4)
    assert cg.get_padded_key(BatchDescriptor(3), 8) == BatchDescriptor(8)
    assert DefaultDispatchPolicy().select_mode(BatchDescriptor(8), ["piecewise"]) is Mode.PIECEWISE
    assert CONFIG.replace(seq_len_buckets=[64]).get_padded_seq_len(5) == 64
    assert cg.create_dispatch_key(4, is_prefill=False) == BatchDescriptor(4, uniform_decode=True)
