"""The capture's one reading of a graph (``driver/snapshot.py``) and the audit's addresses from it,
driven by a fake driver on the CPU (issue 19).

The reader copies kernel parameters through ``kernelParams`` pointers with ctypes; here they point
at host buffers, so parameter layouts, 8-byte alignment, copies, memsets, child graphs,
conditional bodies and unreadable nodes are all checked without a GPU.
"""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

from extras import need

driver = need("cuda.bindings.driver", "cuda", what="the graph walker tests")

from fake_cuda_driver import FakeDriver  # noqa: E402

from cupygraph.backends.driver.snapshot import read_graphs  # noqa: E402
from cupygraph.backends.guards.cupy_audit import NodeAddresses  # noqa: E402

OK, BAD = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE
T = driver.CUgraphNodeType
DEVICE = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
HOST = driver.CUmemorytype.CU_MEMORYTYPE_HOST


class KernelParams:
    """``kernelParams``: an array of pointers, each at one parameter's bytes (kept alive here)."""

    def __init__(self, *values: bytes):
        self.buffers = [ctypes.create_string_buffer(v, len(v)) for v in values]
        self.array = (ctypes.c_void_p * len(values))(*[ctypes.addressof(b) for b in self.buffers])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


def kernel(func, params: KernelParams):
    return (T.CU_GRAPH_NODE_TYPE_KERNEL, SimpleNamespace(func=func, kern=0, kernelParams=params.address, extra=0))


def carray(ptr: int, n: int) -> bytes:
    return struct.pack("<6q", ptr, n, n, 1, 4, 4)


def read(graphs, nodes, layouts, tops=(100,), extra=(), driver_class=None):
    """What the audit finds in the graphs ``tops`` (and ``extra`` bodies), read once through a fake driver."""
    drv = (driver_class or FakeDriver)(graphs, nodes, layouts)
    found = NodeAddresses(read_graphs(tops, extra, drv), lambda name: "cuFFT" if name == "kernel2" else None)
    found.drv = drv
    return found


def cindexer(shape, index_words) -> bytes:
    """CuPy's ``CIndexer<ndim>``: size, shape[ndim], then index[ndim], which CuPy leaves uninitialised."""
    size = 1
    for extent in shape:
        size *= extent
    return struct.pack(f"<{1 + 2 * len(shape)}q", size, *shape, *index_words)


def test_kernel_parameters_are_read_at_their_offsets():
    # A struct at offset 0 that is no CuPy type, an int32 at 48, then a pointer at 56 (8-byte aligned).
    blob = struct.pack("<6q", 7, 3, 0x7F00_0000_1000, 5, 0, 9)
    params = KernelParams(blob, struct.pack("<i", 5), struct.pack("<Q", 0x7F00_0000_2000))
    misaligned = KernelParams(struct.pack("<i", 1), struct.pack("<4xQ", 0x7F00_0000_3000))  # 12 bytes at offset 4
    nodes = {1: kernel(1, params), 2: kernel(2, misaligned)}
    walker = read({100: [1, 2]}, nodes, {1: [(0, 48), (48, 4), (56, 8)], 2: [(0, 4), (4, 12)]})
    first, second = walker.nodes
    assert first.words == (7, 3, 0x7F00_0000_1000, 5, 0, 9, 0x7F00_0000_2000)  # every word of the struct
    assert first.name == "kernel1" and first.library is None
    assert second.words == (0x7F00_0000_3000,) and second.library == "cuFFT"
    assert walker.unaudited == []


GARBAGE = 0x7F00_0000_9000  # an old device address left in a CIndexer's index words


def test_of_cupys_structs_only_the_array_pointer_is_read():
    # An elementwise kernel: two CArrays (ndim 2 and 0), a scalar, a raw pointer, then the CIndexer.
    params = KernelParams(carray(0x7F00_0000_1000, 64), struct.pack("<qq", 0x7F00_0000_1100, 1),
                          struct.pack("<d", 2.5), struct.pack("<Q", 0x7F00_0000_1200),
                          cindexer((16, 4), (GARBAGE, GARBAGE + 8)))
    layout = [(0, 48), (48, 16), (64, 8), (72, 8), (80, 40)]
    walker = read({100: [1]}, {1: kernel(1, params)}, {1: layout})
    (node,) = walker.nodes
    assert node.words == (0x7F00_0000_1000, 0x7F00_0000_1100, struct.unpack("<q", struct.pack("<d", 2.5))[0],
                          0x7F00_0000_1200)


def test_a_cindexers_uninitialised_words_are_no_foreign_memory():
    from cupygraph.backends.guards.audit import Region, classify

    params = KernelParams(carray(0x7F00_0000_1000, 64), cindexer((8, 8), (GARBAGE, 3)))
    walker = read({100: [1]}, {1: kernel(1, params)}, {1: [(0, 48), (48, 40)]})
    live = {GARBAGE: (GARBAGE, 4096)}  # the old address lies in some other live allocation
    report = classify(walker.nodes, [Region(0x7F00_0000_1000, 4096, "static", "argument 0")], live.get)
    assert report.foreign() == [] and report.owners() == {"static": 1}


def test_a_library_kernel_is_read_whole_whatever_its_parameters_look_like():
    # A cuFFT kernel's struct that happens to look like a CIndexer still gives every word.
    params = KernelParams(cindexer((8, 8), (GARBAGE, 3)))
    walker = read({100: [2]}, {2: kernel(2, params)}, {2: [(0, 40)]})
    assert walker.nodes[0].words == (64, 8, 8, GARBAGE, 3)


def test_copies_memsets_child_graphs_and_conditional_bodies_are_followed_once():
    copy = SimpleNamespace(srcMemoryType=DEVICE, srcDevice=0x7F00_0000_0100, srcXInBytes=16, srcY=0, srcPitch=0,
                           dstMemoryType=HOST, dstDevice=0, dstXInBytes=0, dstY=0, dstPitch=0)
    body_kernel = KernelParams(struct.pack("<Q", 0x7F00_0000_4000))
    nodes = {
        1: (T.CU_GRAPH_NODE_TYPE_MEMCPY, copy),
        2: (T.CU_GRAPH_NODE_TYPE_MEMSET, SimpleNamespace(dst=0x7F00_0000_0200)),
        3: (T.CU_GRAPH_NODE_TYPE_GRAPH, 200),
        4: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, SimpleNamespace(conditional=SimpleNamespace(phGraph_out=[300], size=1))),
        5: (T.CU_GRAPH_NODE_TYPE_CONDITIONAL, None),  # the driver cannot describe this one
        6: kernel(3, body_kernel),
        7: (T.CU_GRAPH_NODE_TYPE_EMPTY, None),
    }
    # Body 300 is handed over by control flow too: read once all the same.
    walker = read({100: [1, 2, 3, 4, 5, 7], 200: [7], 300: [6]}, nodes, {3: [(0, 8)]}, extra=(300,))
    assert [(n.kind, n.words, n.exact) for n in walker.nodes] == [
        ("memcpy", (0x7F00_0000_0110,), True),  # the host side of the copy is not device memory
        ("memset", (0x7F00_0000_0200,), True),
        ("kernel", (0x7F00_0000_4000,), False),
    ]
    assert walker.drv.listed == [100, 200, 300]
    assert walker.unaudited == ["conditional node"]


def test_an_unreadable_node_or_graph_is_reported_and_the_rest_still_walked():
    good = KernelParams(struct.pack("<Q", 0x7F00_0000_5000))
    nodes = {1: (T.CU_GRAPH_NODE_TYPE_KERNEL, None), 2: kernel(4, good)}  # node 1's params break the reader
    walker = read({100: [1, 2]}, nodes, {4: [(0, 8)]}, extra=(999,))  # 999: a handle the driver does not know
    assert [n.words for n in walker.nodes] == [(0x7F00_0000_5000,)]
    assert len(walker.unaudited) == 2
    assert walker.unaudited[0].startswith("a node that could not be read (AttributeError")
    assert walker.unaudited[1] == "a graph whose nodes could not be listed"


def test_a_kernel_without_a_parameter_layout_is_unaudited():
    class OldDriver(FakeDriver):
        def cuFuncGetParamInfo(self, func, index):
            return (driver.CUresult.CUDA_ERROR_NOT_SUPPORTED, 0, 0)

    walker = read({100: [1]}, {1: kernel(5, KernelParams(b"\0" * 8))}, {}, driver_class=OldDriver)
    assert walker.nodes == [] and walker.unaudited == ["kernel 'kernel5' (no parameter layout: needs CUDA 12.4+)"]


def test_control_flow_hands_its_body_graphs_to_the_capture_that_collects_them():
    from cupygraph.backends.graph_bodies import NotedBody, collecting_bodies, note_body

    def body(graph):
        return NotedBody(graph, 10, "while", f"body {graph}")

    note_body(body(1))  # nobody collecting: dropped
    with collecting_bodies() as outer:
        note_body(body(2))
        with collecting_bodies() as inner:
            note_body(body(3))
        note_body(body(4))
    assert [b.graph for b in outer] == [2, 4] and [b.graph for b in inner] == [3]


def test_a_reading_that_fails_says_why_and_holds_no_snapshot():
    """A capture whose graphs cannot be read keeps going (zero-copy copies, PDL keeps plain edges), but
    the reason is kept, so the audit says "not audited" instead of reporting a clean graph."""
    from cupygraph.backends.driver.reading import RecordingGraphs

    class Broken:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

    graphs = RecordingGraphs([SimpleNamespace(graph=100)], [], needed=True, drv=Broken())
    assert graphs.tops == {} and graphs.bodies == []
    assert graphs.problem is not None and "RuntimeError" in graphs.problem
    assert RecordingGraphs([SimpleNamespace(graph=100)], [], needed=False, drv=Broken()).problem is None
