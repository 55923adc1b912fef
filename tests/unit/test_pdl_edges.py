"""Programmatic dependent launch: which edges of a recorded graph are rewritten (issue 18).

The decision runs on graph descriptions (nodes with kinds and 'waits' verdicts, edges), the same
ones the GPU backend reads from captured CUDA graphs; the host backend records no edges.
"""

from __future__ import annotations

import pytest

import cupygraph as cg
from cupygraph.backends.pdl.edges import MAX_NAMED, Edge, GraphDescription, Node, PdlSummary, choose_edges

WAITS = Node("kernel", "waits", waits=True, scanned=True)
PLAIN = Node("kernel", "plain", reason="no griddepcontrol.wait (CUPYGRAPH_PDL_WAIT) in the kernel", scanned=True)
UNREAD = Node("kernel", "unread", reason="not scanned: no live cupy.RawKernel ... loaded its module")


def graph(nodes: dict, *edges: tuple) -> GraphDescription:
    return GraphDescription(nodes, tuple(Edge(*e) for e in edges))


def converted(choice) -> set:
    return {(e.src, e.dst) for e in choice.convert}


def test_a_chain_of_waiting_kernels_is_converted_edge_by_edge():
    chain = graph({i: WAITS for i in range(5)}, *[(i, i + 1) for i in range(4)])
    choice = choose_edges(chain)
    assert converted(choice) == {(0, 1), (1, 2), (2, 3), (3, 4)}
    assert choice.kept == {}


def test_an_edge_into_a_kernel_that_does_not_wait_stays_and_names_the_kernel():
    choice = choose_edges(graph({"a": WAITS, "b": PLAIN, "c": WAITS}, ("a", "b"), ("b", "c")))
    assert converted(choice) == {("b", "c")}
    assert choice.kept == {"consumer_does_not_wait": 1}
    assert choice.not_converted == {"plain": PLAIN.reason}


def test_an_edge_into_a_kernel_that_was_not_scanned_stays_and_says_so_not_that_it_does_not_wait():
    choice = choose_edges(graph({"a": WAITS, "u": UNREAD, "p": PLAIN, "b": WAITS},
                                ("a", "u"), ("u", "p"), ("p", "b")))
    assert converted(choice) == {("p", "b")}
    assert choice.kept == {"consumer_not_scanned": 1, "consumer_does_not_wait": 1}
    assert choice.not_converted == {"unread": UNREAD.reason, "plain": PLAIN.reason}


def test_a_kernel_node_is_not_scanned_unless_a_scan_said_so():
    assert Node("kernel").scanned is False
    choice = choose_edges(graph({"a": WAITS, "k": Node("kernel", "k")}, ("a", "k")))
    assert choice.convert == () and choice.kept == {"consumer_not_scanned": 1}


def test_diamonds_convert_every_kernel_to_kernel_edge():
    fan = graph({"a": WAITS, "b": WAITS, "c": WAITS, "d": WAITS}, ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))
    assert converted(choose_edges(fan)) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}


def test_the_narrow_choice_skips_kernels_with_several_dependencies():
    fan = graph({"a": WAITS, "b": WAITS, "c": WAITS, "d": WAITS}, ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))
    choice = choose_edges(fan, sole_dependency_only=True)
    assert converted(choice) == {("a", "b"), ("a", "c")}
    assert choice.kept == {"consumer_has_other_dependencies": 2}


@pytest.mark.parametrize("kind", ["memcpy", "memset", "conditional", "graph", "empty", "host"])
def test_edges_touching_other_nodes_stay(kind: str):
    other = Node(kind)
    choice = choose_edges(graph({"a": WAITS, "x": other, "b": WAITS}, ("a", "x"), ("x", "b"), ("a", "b")))
    assert converted(choice) == {("a", "b")}
    assert choice.kept == {"consumer_not_kernel": 1, "producer_not_kernel": 1}


def test_a_conditional_body_is_chosen_for_on_its_own_and_its_boundaries_stay():
    # Parent: set-kernel -> conditional -> after; the body's own kernels form a separate graph.
    parent = graph({"set": WAITS, "if": Node("conditional"), "after": WAITS}, ("set", "if"), ("if", "after"))
    body = graph({"b1": WAITS, "b2": WAITS, "step": WAITS}, ("b1", "b2"), ("b2", "step"))
    assert converted(choose_edges(parent)) == set()
    assert converted(choose_edges(body)) == {("b1", "b2"), ("b2", "step")}


def test_edges_that_are_already_special_are_left_alone():
    choice = choose_edges(graph({"a": WAITS, "b": WAITS}, ("a", "b", False)))
    assert choice.convert == ()
    assert choice.kept == {"edge_not_plain": 1}


def test_a_library_kernel_keeps_its_edges_both_ways():
    library = Node("kernel", "cutlass_gemm", reason="not scanned: a library kernel (CUkernel)")
    choice = choose_edges(graph({"a": WAITS, "lib": library, "b": WAITS}, ("a", "lib"), ("lib", "b")))
    # The edge out of the library kernel may convert: the consumer waits for it to finish.
    assert converted(choice) == {("lib", "b")}
    assert choice.not_converted == {"cutlass_gemm": library.reason}
    assert choice.kept == {"consumer_not_scanned": 1}


def test_the_summary_adds_choices_and_names_a_bounded_number_of_kernels():
    summary = PdlSummary()
    for i in range(3 * MAX_NAMED):
        node = Node("kernel", f"k{i}", reason="r", scanned=i % 2 == 0)
        summary.add(choose_edges(graph({"a": WAITS, f"k{i}": node}, ("a", f"k{i}"))))
    summary.add(choose_edges(graph({"a": WAITS, "b": WAITS}, ("a", "b"))))
    assert summary.converted == 1
    assert summary.kept == {"consumer_does_not_wait": 3 * MAX_NAMED // 2, "consumer_not_scanned": 3 * MAX_NAMED // 2}
    assert summary.kept_total == 3 * MAX_NAMED
    assert len(summary.not_converted) == MAX_NAMED


def test_config_pdl_accepts_auto_and_off_in_any_case_and_names_the_choices():
    assert cg.CUDAGraphConfig().pdl == "auto"
    assert cg.CUDAGraphConfig(pdl="OFF").pdl == "off"
    with pytest.raises(cg.ConfigError, match=r"pdl.*auto, off"):
        cg.CUDAGraphConfig(pdl="on")


def test_the_host_backend_accepts_pdl_and_records_no_edges():
    import numpy as np

    for setting in ("auto", "off"):
        f = cg.jit(lambda x: x * 2, config=dict(backend="host", capture_sizes=[4], pdl=setting))
        x = np.arange(8, dtype=np.float32).reshape(4, 2)
        np.testing.assert_array_equal(f(x), x * 2)
        assert f.stats().pdl_edges_converted == 0
