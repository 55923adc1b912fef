"""Memory a graph does not own (issue 19), on the CPU.

* ``memaudit.classify`` on recorded node descriptions (as the GPU walker makes them): every
  address lands in exactly one owner, in precedence order, and unknown device memory is foreign;
* ``foreign.find_arrays`` names arrays reached through closures, globals, defaults and ``self``;
* the host backend warns about such arrays at capture and, under ``debug=True``, refuses a replay
  after one was freed or rebound — as the GPU backend does for the arrays its graph touches;
* ``assert_graph_memory_safe`` (and its fixture) checks results and watched arrays on the host.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.backends.guards.audit import NodeRefs, Region, classify
from cupygraph.backends.guards.foreign import ForeignMemoryError, ForeignMemoryWarning, find_arrays
from cupygraph.testing import assert_graph_memory_safe

HOST = dict(backend="host", max_capture_size=16)
MiB = 1 << 20

# A made-up device address space: one family pool block, a default-pool chunk, a plan work area.
POOL = 0x7F00_0000_0000
DEFAULT_CHUNK = 0x7F10_0000_0000
WORK_AREA = 0x7F20_0000_0000
ELSEWHERE = 0x7F30_0000_0000  # a live allocation no region describes


def carray(ptr: int, *shape: int) -> tuple[int, ...]:
    """The 8-byte words of a CuPy CArray kernel parameter: pointer, size, shape, strides."""
    size = int(np.prod(shape))
    strides = [4 * int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    return (ptr, size, *shape, *strides)


def allocations(*ranges: tuple[int, int]):
    """An ``allocation_of`` that knows ``ranges`` and counts how often it is asked."""
    asked: list[int] = []

    def allocation_of(address: int):
        asked.append(address)
        for base, size in ranges:
            if base <= address < base + size:
                return base, size
        return None

    allocation_of.asked = asked  # type: ignore[attr-defined]
    return allocation_of


REGIONS = [
    Region(POOL, 8 * MiB, "pool", "the function's memory pool"),
    Region(POOL + MiB, 4096, "static", "argument 0 (float32[8, 128], static buffer)"),
    Region(DEFAULT_CHUNK, 4096, "constant", "argument 1 (float32[128], captured by address)"),
    Region(WORK_AREA, 65536, "held", "a cuFFT plan's work area, held by the graph"),
]


def test_each_address_lands_in_its_owner_with_static_buffers_before_the_pool_around_them():
    nodes = [
        NodeRefs("kernel", "scale",
                 carray(POOL + MiB, 8, 128) + carray(DEFAULT_CHUNK, 128) + carray(POOL + 2 * MiB, 8, 128)),
        NodeRefs("kernel", "fft_like", (WORK_AREA + 512, 4099, 8)),
        NodeRefs("memcpy", "", (POOL + 2 * MiB + 64, POOL + 3 * MiB), exact=True),
    ]
    report = classify(nodes, REGIONS, allocations((POOL, 8 * MiB)))
    owners = {ref.owner: ref for ref in report.references}
    assert set(owners) == {"static", "constant", "held", "pool"}
    assert report.owners() == {"static": 1, "constant": 1, "held": 1, "pool": 1}
    assert owners["static"].label.startswith("argument 0")
    assert owners["pool"].nodes == ["kernel 'scale'", "memcpy"]
    assert report.foreign() == [] and report.nodes == 3


def test_unknown_device_memory_is_foreign_and_reported_with_its_allocation():
    nodes = [NodeRefs("kernel", "reads_a_global", carray(ELSEWHERE + 256, 64) + carray(POOL, 64))]
    report = classify(nodes, REGIONS, allocations((ELSEWHERE, 4096)))
    (foreign,) = report.foreign()
    assert foreign.owner == "unknown" and foreign.allocation == (ELSEWHERE, 4096)
    text = foreign.describe()
    assert f"0x{ELSEWHERE + 256:x}" in text and "4096-byte allocation" in text and "reads_a_global" in text


def test_a_named_closure_array_is_foreign_under_its_name_but_the_family_pool_wins_over_it():
    named = Region(DEFAULT_CHUNK + 8192, 1024, "foreign", "closure variable 'table' (float32[256])")
    cached = Region(POOL + 4 * MiB, 1024, "foreign", "global 'CACHE' (float32[256])")
    nodes = [NodeRefs("kernel", "k", (DEFAULT_CHUNK + 8192, POOL + 4 * MiB))]
    report = classify(nodes, [*REGIONS, named, cached], allocations())
    assert [r.label for r in report.foreign()] == ["closure variable 'table' (float32[256])"]
    assert report.owners()["pool"] == 1  # an array the function keeps in a global, made in its own pool


def test_library_kernels_own_their_internal_memory_when_the_recording_holds_the_plan():
    nodes = [
        NodeRefs("kernel", "regular_fft_len4099", (ELSEWHERE, WORK_AREA), library="cuFFT"),
        NodeRefs("kernel", "user_kernel", (ELSEWHERE + 8,)),
    ]
    report = classify(nodes, REGIONS, allocations((ELSEWHERE, 4096)))
    held = [r for r in report.references if r.owner == "held"]
    assert {r.label for r in held} == {"a cuFFT plan's work area, held by the graph",
                                       "cuFFT internal memory, held with its plan or handle"}
    (foreign,) = report.foreign()  # the same allocation read by a kernel that is not cuFFT's
    assert foreign.nodes == ["kernel 'user_kernel'"]


def test_words_that_are_not_addresses_cost_no_driver_query_and_repeats_are_asked_once():
    ask = allocations()
    nodes = [NodeRefs("kernel", "k", (0, 1, 4099, 8, 1 << 60, 0x3F80_0000_3F80_0000, 0x1234_5678_9A)),
             NodeRefs("kernel", "k2", (0x1234_5678_9A, 0x1234_5678_9A))]
    report = classify(nodes, REGIONS, ask)
    assert report.references == []
    assert ask.asked == [0x1234_5678_9A]  # sizes, flags and float bit patterns are skipped


def test_exact_copy_addresses_are_not_filtered_and_each_reference_names_at_most_three_nodes():
    nodes = [NodeRefs("memset", "", (POOL + 16,), exact=True)] + [
        NodeRefs("kernel", f"k{i}", (POOL + i,)) for i in range(5)]
    (pool,) = classify(nodes, REGIONS, allocations()).references
    assert pool.nodes == ["memset", "kernel 'k0'", "kernel 'k1'"]


def test_overlapping_regions_of_one_owner_are_all_found():
    wide = Region(DEFAULT_CHUNK, 1 << 20, "constant", "argument 2 (a large weight)")
    inner = Region(DEFAULT_CHUNK + 4096, 64, "constant", "argument 3 (a view)")
    report = classify([NodeRefs("kernel", "k", (DEFAULT_CHUNK + 8192, DEFAULT_CHUNK + 4100))],
                      [wide, inner], allocations())
    assert {r.label for r in report.references} == {"argument 2 (a large weight)", "argument 3 (a view)"}


# Recorded on an H200 (CuPy 14.2, CUDA 13.2): the graph of ``fft(x * 2, axis=1) + 1`` on a
# complex64 (8, 4099) batch — a CuPy multiply, six cuFFT Bluestein kernels, a CuPy add. Word lists
# abridged to the pointers and a few sizes; the two 69120-byte allocations are cuFFT's own.
X, TMP, OUT = 0x7FA40DE40200, 0x7FA40DEC0600, 0x7FA40DF22400
WORK, INTERNAL = 0x7FA413A00000, (0x7FA40DF00800, 0x7FA40DF11600)
BLUESTEIN = "_Z19multi_bluestein_fftILj5E3EPTIJLj5EEELj256ELj0EL9padding_t14EL9twiddle_t0E"


def h200_fft_graph(library):
    fft_nodes = [
        (TMP, WORK, 0x6C0FFFFFFFF, 0x100000008, *INTERNAL), (WORK, WORK + 0x87000, 0x40FFFFFFFF, *INTERNAL),
        (WORK + 0x87000, WORK, 0x87FFFFFFFF, *INTERNAL), (WORK, WORK, 0x6C000000001, *INTERNAL),
        (WORK, WORK + 0x87000, 0x4000000001, *INTERNAL), (WORK + 0x87000, OUT, 0x8700000001, *INTERNAL),
    ]
    return [
        NodeRefs("kernel", "cupy_multiply__complex64_complex_complex64", (X, 0x8018, 0x8018, 8, 0x40000000, TMP)),
        *[NodeRefs("kernel", BLUESTEIN, words, library=library) for words in fft_nodes],
        NodeRefs("kernel", "cupy_add__complex64_complex_complex64", (OUT, 0x8018, 0x8018, 8, 0x3F800000, TMP)),
    ]


# The family pool's device blocks: cuFFT's own allocations sit between them.
POOL_BLOCKS = [(X, 0x80400), (TMP, 0x40200), (OUT, 0x40200)]


def h200_allocations():
    return allocations(*POOL_BLOCKS, *((base, 69120) for base in INTERNAL), (WORK, 1105920))


def h200_regions(work_area_owner, work_area_label):
    return [
        *(Region(start, size, "pool", "the function's memory pool") for start, size in POOL_BLOCKS),
        Region(X, 262656, "static", "argument 0 (complex64[8, 4099], static buffer)"),
        Region(WORK, 1105920, work_area_owner, work_area_label),
    ]


def test_recorded_h200_fft_graph_is_fully_owned_when_the_graph_holds_its_plan():
    regions = h200_regions("held", "a cuFFT plan's work area, held by the graph")
    report = classify(h200_fft_graph("cuFFT"), regions, h200_allocations())
    assert report.owners() == {"static": 1, "held": 3, "pool": 2}  # as the audit reported on the H200
    assert report.foreign() == []


def test_recorded_h200_fft_graph_using_a_plan_from_cupys_cache_is_foreign():
    regions = h200_regions("foreign", "the work area of a cuFFT plan in CuPy's plan cache")
    report = classify(h200_fft_graph(None), regions, h200_allocations())
    assert report.owners() == {"static": 1, "pool": 2, "foreign": 1, "unknown": 2}
    assert {ref.allocation for ref in report.foreign() if ref.owner == "unknown"} == {(b, 69120) for b in INTERNAL}


def test_a_region_must_name_a_known_owner():
    with pytest.raises(ValueError, match="owner must be one of"):
        Region(0, 8, "mine", "x")


# -- finding arrays outside the arguments ---------------------------------------------------------

LUT = np.arange(4.0)
BIAS = np.full(2, 7.0)


def _uses_lut(x):
    return x + LUT


def test_find_arrays_follows_closures_globals_helpers_defaults_and_self():
    table = np.ones(3)
    config = {"weights": [np.zeros(2)]}

    def fn(x, bias=BIAS):
        return _uses_lut(x) * table + config["weights"][0].sum() + bias

    names = {f.name for f in find_arrays(fn, lambda v: isinstance(v, np.ndarray))}
    assert names == {"closure variable 'table'", "closure variable 'config'['weights'][0]",
                     "global 'LUT'", "default of argument 'bias'"}

    class Model:
        def __init__(self):
            self.w = np.ones(2)

        def __call__(self, x):
            return x * self.w

        def forward(self, x):
            return x * self.w

    model = Model()
    assert [f.name for f in find_arrays(model, lambda v: isinstance(v, np.ndarray))] == ["self.w"]
    assert [f.name for f in find_arrays(model.forward, lambda v: isinstance(v, np.ndarray))] == ["self.w"]


def test_find_arrays_is_bounded_by_its_budget():
    big = {f"k{i}": np.ones(1) for i in range(50)}

    def fn(x):
        return x + big["k0"]

    assert len(find_arrays(fn, lambda v: isinstance(v, np.ndarray))) == 50
    assert len(find_arrays(fn, lambda v: isinstance(v, np.ndarray), budget=10)) < 10


# -- the host backend: warning at capture, error in debug mode -------------------------------------


def _closure_over(table):
    def scaled(x):
        return x * table

    return scaled


def _rebind(fn, value):
    (cell,) = fn.__closure__
    cell.cell_contents = value


def test_host_backend_warns_at_capture_naming_the_closure_variable_once_per_function():
    fn = _closure_over(np.arange(3.0))
    graphed = cg.jit(fn, config=HOST)
    with pytest.warns(ForeignMemoryWarning, match=r"closure variable 'table' \(float64\[3\]\)") as record:
        graphed(np.ones((2, 3)))
    assert "constant_argnums" in str(record[0].message)
    assert record[0].filename == __file__  # points at the function's definition
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForeignMemoryWarning)
        graphed(np.ones((5, 3)))  # another size: a new capture, no second warning
    assert graphed.stats().captures == 2


def test_arrays_passed_as_arguments_are_not_foreign():
    w = np.arange(3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForeignMemoryWarning)
        as_constant = cg.jit(lambda x, w: x * w, config=HOST, constant_argnums=(1,))
        assert as_constant(np.ones((2, 3)), w).tolist() == [[0.0, 1.0, 2.0]] * 2
        pure = cg.jit(lambda x: x * 2, config=HOST)
        pure(np.ones((2, 3)))


@pytest.mark.parametrize("change", ["rebound", "freed"])
def test_debug_mode_refuses_a_replay_after_a_closure_array_was_rebound_or_freed(change):
    keep = np.arange(3.0)
    fn = _closure_over(keep)
    graphed = cg.jit(fn, config=dict(HOST, debug=True))
    with pytest.warns(ForeignMemoryWarning):
        graphed(np.ones((2, 3)))
    graphed(np.ones((2, 3)))  # unchanged: replays
    if change == "freed":
        del keep  # the closure holds the only reference now; rebinding frees the array
    _rebind(fn, np.zeros(3))
    expected = "was rebound to another object" if change == "rebound" else "the array the graph reads was freed"
    with pytest.raises(ForeignMemoryError, match=f"closure variable 'table'.*{expected}"):
        graphed(np.ones((2, 3)))
    graphed.clear()  # a new capture reads the new array
    with pytest.warns(ForeignMemoryWarning):
        assert graphed(np.ones((2, 3))).tolist() == [[0.0, 0.0, 0.0]] * 2


def test_without_debug_a_rebound_closure_is_not_checked_on_replay():
    fn = _closure_over(np.arange(3.0))
    graphed = cg.jit(fn, config=HOST)
    with pytest.warns(ForeignMemoryWarning):
        graphed(np.ones((2, 3)))
    _rebind(fn, np.zeros(3))
    graphed(np.ones((2, 3)))  # the host re-executes: no error, the warning at capture was the notice
    assert graphed.stats().hits == 1


def test_debug_mode_catches_a_deleted_global():
    namespace: dict = {"np": np}
    exec("TABLE = np.ones(3)\ndef fn(x):\n    return x * TABLE\n", namespace)
    graphed = cg.jit(namespace["fn"], config=dict(HOST, debug=True))
    with pytest.warns(ForeignMemoryWarning, match="global 'TABLE'"):
        graphed(np.ones((2, 3)))
    del namespace["TABLE"]
    with pytest.raises(ForeignMemoryError, match=r"global 'TABLE'.*was deleted"):
        graphed(np.ones((2, 3)))


# -- the poisoning helper on the host (the GPU tests poison for real) ------------------------------


def test_memory_safe_helper_passes_a_pure_function_and_checks_it_replayed():
    graphed = assert_graph_memory_safe(lambda x: np.tanh(x) * 2, np.ones((6, 4)), sizes=[6, 3], config=HOST)
    stats = graphed.stats()
    assert stats.captures == 2 and stats.hits == 6 and stats.fallbacks == 0


def test_memory_safe_helper_fails_when_a_replay_writes_into_a_watched_array():
    log = np.zeros(4)

    def leaky(x):
        log[0] += 1  # a side effect outside the outputs
        return x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignMemoryWarning)
        with pytest.raises(pytest.fail.Exception, match="watched array 0 changed"):
            assert_graph_memory_safe(leaky, np.ones((4, 2)), watch=[log], config=HOST)


def test_memory_safe_helper_fails_when_results_differ_from_eager():
    state = {"calls": 0}

    def drifting(x):
        state["calls"] += 1
        return x + state["calls"]  # a host value frozen at capture on the GPU; here it drifts per call

    with pytest.raises(pytest.fail.Exception, match="under memory poisoning"):
        assert_graph_memory_safe(drifting, np.ones((4, 2)), config=HOST)


def test_memory_poisoning_fixture_clears_the_functions_it_made(cupygraph_memory_poisoning):
    graphed = cupygraph_memory_poisoning(lambda x: x * 3, np.ones((4, 2)), config=HOST)
    assert graphed.registry.num_graphs() == 1
