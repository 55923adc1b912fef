"""Programmatic dependent launch between kernels that opt in, on a real GPU (issue 18).

Every PDL graph is compared bit for bit with the same graph captured with ``pdl="off"`` and with
the function run eagerly, on fresh random data, with every buffer poisoned (NaN) before each run.
Producers spin so that a consumer started early and not waiting would read stale data. The edges
of each graph are read back to check which ones became programmatic. Needs sm_90+.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
driver = pytest.importorskip("cuda.bindings.driver", reason="needs cuda-bindings")

N = 4096
SPIN = 64
BODY = r'''
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = ca * a[i] + cb * b[i];
        for (int k = 0; k < spin; ++k) v = v * 0.999f + 0.001f;
        y[i] = v;
    }
'''
SIGNATURE = "(const float* a, const float* b, float* y, int n, float ca, float cb, int spin)"
SOURCE = "\n".join([
    f'extern "C" __global__ void mix_wait{SIGNATURE} {{ CUPYGRAPH_PDL_TRIGGER(); CUPYGRAPH_PDL_WAIT(); {BODY} }}',
    f'extern "C" __global__ void mix_wait_late{SIGNATURE} {{ CUPYGRAPH_PDL_WAIT(); {BODY} CUPYGRAPH_PDL_TRIGGER(); }}',
    # Triggers but never waits: converting an edge into it would be a race, so it must stay plain.
    f'extern "C" __global__ void mix_trigger_only{SIGNATURE} {{ CUPYGRAPH_PDL_TRIGGER(); {BODY} }}',
    f'extern "C" __global__ void mix_plain{SIGNATURE} {{ {BODY} }}',
])
WAITING = {"mix_wait", "mix_wait_late"}


@pytest.fixture(scope="module")
def kernels(sm90_device):
    module = cg.pdl_module(SOURCE)
    found = {name: module.get_function(name) for name in ("mix_wait", "mix_wait_late", "mix_trigger_only",
                                                            "mix_plain")}
    # Waits in its code, compiled around cupygraph (plain cupy.RawKernel, other options, so another
    # CuPy module): found behind the graph's node by its module (issue 30), scanned, converted.
    found["mix_raw"] = cupy.RawKernel(cg.with_pdl(SOURCE), "mix_wait", options=("-DCOMPILED_AROUND_CUPYGRAPH",))
    return found


def launch(kernel, a, b, y, ca=0.75, cb=0.25, spin=SPIN):
    n = y.size
    kernel(((n + 255) // 256,), (256,), (a, b, y, np.int32(n), np.float32(ca), np.float32(cb), np.int32(spin)))


def fresh(rng):
    """One row of N: a batch of 1, which jit's default capture sizes hold exactly."""
    return cupy.asarray(rng.standard_normal((1, N)).astype(np.float32))


def poison(*arrays):
    for a in arrays:
        a.fill(np.nan)


def bits(a):
    return cupy.asnumpy(a).view(np.uint32)


def edges_of(graph_handle: int):
    """(src function name, dst function name, programmatic) of each edge ('' for non-kernels)."""
    g = driver.CUgraph(int(graph_handle))
    _, _, _, _, count = driver.cuGraphGetEdges(g, 0)
    err, src, dst, data, count = driver.cuGraphGetEdges(g, count)
    assert err == driver.CUresult.CUDA_SUCCESS

    def name(node):
        _, kind = driver.cuGraphNodeGetType(node)
        if kind != driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            return ""
        _, params = driver.cuGraphKernelNodeGetParams(node)
        err, raw = driver.cuFuncGetName(params.func)
        return raw.decode() if err == driver.CUresult.CUDA_SUCCESS and raw else "?"

    return [(name(s), name(d), int(e.type) == 1) for s, d, e in zip(src[:count], dst[:count], data[:count])]


def graph_handles(f):
    return [int(step.graph) for e in f.registry.entries() for step in e.recording.steps if hasattr(step, "graph")]


def run_three_ways(fn, inputs_of, rng, replays=3, **config):
    """fn graphed with PDL, graphed without, and eager: bit-identical on fresh data each replay."""
    pdl = cg.jit(fn, config=dict(on_capture_error="raise", pdl="auto", **config))
    plain = cg.jit(fn, config=dict(on_capture_error="raise", pdl="off", **config))
    for _ in range(replays):
        args = inputs_of(rng)
        want = [bits(o) for o in _leaves(fn(*args))]
        for f in (pdl, plain):
            got = [bits(o) for o in _leaves(f(*args))]
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
    for f in (pdl, plain):
        stats = f.stats()
        assert stats.captures == 1 and stats.fallbacks == 0 and stats.hits == replays - 1, stats
    return pdl, plain


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


# -- shapes of graphs ---------------------------------------------------------------------------------


def test_a_chain_of_waiting_kernels_is_bit_identical_and_fully_converted(kernels):
    def chain(x):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b)
        src = x
        for i in range(20):
            launch(kernels["mix_wait" if i % 2 else "mix_wait_late"], src, src, a if i % 2 else b)
            src = a if i % 2 else b
        return src

    pdl, plain = run_three_ways(chain, lambda rng: (fresh(rng),), np.random.default_rng(1))
    # The two poison fills (CuPy kernels), then 20 waiting kernels: the second fill -> first mix
    # edge converts too (its consumer waits), the fill -> fill edge does not.
    assert pdl.stats().pdl_edges_converted == 20
    assert pdl.stats().pdl_edges_kept_by_reason == {"consumer_does_not_wait": 1}
    assert plain.stats().pdl_edges_converted == 0


def test_diamonds_one_feeding_two_and_two_feeding_one(kernels):
    side = cupy.cuda.Stream(non_blocking=True)
    wait = kernels["mix_wait"]

    def diamond(x):
        here = cupy.cuda.get_current_stream()
        a, b, c, d = (cupy.empty_like(x) for _ in range(4))
        poison(a, b, c, d)
        launch(wait, x, x, a)
        side.wait_event(here.record())
        launch(wait, a, x, b, spin=4 * SPIN)          # one feeding two: a -> b, a -> c
        with side:
            launch(wait, a, a, c, ca=0.5, cb=-0.25)
        here.wait_event(side.record())
        launch(wait, b, c, d)                          # two feeding one: b, c -> d
        return d, b, c

    pdl, _ = run_three_ways(diamond, lambda rng: (fresh(rng),), np.random.default_rng(2))
    stats = pdl.stats()
    # fill -> a, a -> b, a -> c, and b -> d, c -> d unless the driver refuses a kernel with two
    # programmatic dependencies (then the narrower choice keeps d's edges plain).
    if stats.pdl_edges_converted == 3:
        assert stats.pdl_edges_kept_by_reason["consumer_has_other_dependencies"] == 2
    else:
        assert stats.pdl_edges_converted == 5


def test_memcpy_and_library_nodes_keep_plain_edges(kernels):
    wait = kernels["mix_wait"]

    def mixed(x):
        a, b, c = cupy.empty_like(x), cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b, c)
        launch(wait, x, x, a)
        cupy.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, a.nbytes, 3,  # a memcpy node between kernels
                                      cupy.cuda.get_current_stream().ptr)
        launch(wait, b, x, c)
        s = cupy.cumsum(c).reshape(c.shape)            # CuPy's own (library) kernels
        fft = cupy.fft.fft(c).real.astype(cupy.float32)
        out = cupy.empty_like(x)
        launch(wait, s, fft, out)
        return out, s

    pdl, _ = run_three_ways(mixed, lambda rng: (fresh(rng),), np.random.default_rng(3))
    for src, dst, programmatic in (e for h in graph_handles(pdl) for e in edges_of(h)):
        if programmatic:
            assert src and dst in WAITING, (src, dst)
        elif src and dst in WAITING:
            pytest.fail(f"kernel edge {src} -> {dst} into a waiting kernel stayed plain")


def test_a_kernel_reading_a_buffer_written_two_steps_earlier(kernels):
    wait = kernels["mix_wait"]

    def two_back(x):
        a, b, c = cupy.empty_like(x), cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b, c)
        launch(wait, x, x, a, spin=8 * SPIN)           # slow producer of a
        launch(wait, x, x, b, spin=1)                  # fast, does not read a
        launch(wait, a, b, c)                          # reads a, two steps back
        launch(wait, c, c, a)                          # then overwrites a (write after read)
        return a, c

    run_three_ways(two_back, lambda rng: (fresh(rng),), np.random.default_rng(4))


def test_mixed_opted_in_and_plain_kernels(kernels):
    order = ["mix_wait", "mix_plain", "mix_trigger_only", "mix_wait", "mix_raw", "mix_wait_late", "mix_plain",
             "mix_wait"]

    def mixed(x):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b)
        src = x
        for i, name in enumerate(order):
            dst = a if i % 2 else b
            launch(kernels[name], src, x, dst, spin=SPIN * (1 + i % 3))
            src = dst
        return src

    pdl, _ = run_three_ways(mixed, lambda rng: (fresh(rng),), np.random.default_rng(5))
    edges = [e for h in graph_handles(pdl) for e in edges_of(h)]
    converted = [(s, d) for s, d, p in edges if p]
    assert all(d in WAITING for _, d in converted), converted
    # fill -> wait, trigger_only -> wait, wait -> raw, raw -> wait_late, plain -> wait. mix_raw runs
    # mix_wait's code compiled around cupygraph: found through the plain RawKernel, it waits (issue 30).
    # Kept: the fill -> fill edge (CuPy's ElementwiseKernel, scanned), wait -> plain, plain ->
    # trigger_only, wait_late -> plain.
    assert len(converted) == 5, converted
    assert pdl.stats().pdl_edges_kept_by_reason == {"consumer_does_not_wait": 4}


def test_debug_log_names_the_kernels_left_plain(kernels, caplog):
    def two(x):
        y = cupy.empty_like(x)
        z = cupy.empty_like(x)
        launch(kernels["mix_wait"], x, x, y)
        launch(kernels["mix_plain"], y, y, z)
        return z

    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        run_three_ways(two, lambda rng: (fresh(rng),), np.random.default_rng(6), replays=1)
    text = caplog.text
    assert "kernel 'mix_plain' keeps plain edges" in text
    assert "no griddepcontrol.wait" in text


# -- control flow, pieces, the wrapper path ---------------------------------------------------------


def test_while_loop_and_cond_bodies(kernels):
    from cupygraph.control_flow import loops as cf

    reason = cf.conditional_nodes_unavailable_reason()
    if reason is not None:
        pytest.skip(f"conditional graph nodes unavailable: {reason}")
    wait = kernels["mix_wait"]

    def looped(x, n):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b)
        count = cupy.zeros(1, cupy.int32)
        launch(wait, x, x, a)

        def body():
            launch(wait, a, x, b)
            launch(wait, b, b, a, ca=0.5, cb=0.25)
            cupy.add(count, 1, out=count)

        cg.while_loop(lambda: count < n, body)
        flag = (a.ravel()[:1] > 0).astype(cupy.int32)
        cg.cond(flag, lambda: launch(wait, a, a, b, ca=2.0, cb=0.0), lambda: launch(wait, a, x, b, spin=1))
        return a, b, count

    def inputs(rng):
        return fresh(rng), cupy.asarray(np.array([rng.integers(1, 6)], dtype=np.int32))

    run_three_ways(looped, inputs, np.random.default_rng(7), replays=4)


def test_piecewise_pieces(kernels):
    wait = kernels["mix_wait"]

    @cg.graph_break
    def middle(v):
        return v * 1.5

    def pieces(x):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        poison(a, b)
        launch(wait, x, x, a)
        launch(wait, a, x, b)
        m = middle(b)
        launch(wait, m, m, a)
        launch(wait, a, m, b)
        return b

    pdl, _ = run_three_ways(pieces, lambda rng: (fresh(rng),), np.random.default_rng(8), mode="PIECEWISE")
    assert pdl.stats().pdl_edges_converted >= 2


def test_the_recording_launches_the_programmatic_executable_it_owns(kernels):
    def chain(x):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        launch(kernels["mix_wait"], x, x, a)
        launch(kernels["mix_wait"], a, x, b)
        return b

    pdl, _ = run_three_ways(chain, lambda rng: (fresh(rng),), np.random.default_rng(9))
    assert pdl.stats().pdl_edges_converted == 1
    (entry,) = pdl.registry.entries()
    step = entry.recording.steps[0]  # CuPy's graph stays, for its graph and DOT output
    (handle,) = entry.recording.banks[0].handles
    assert handle != int(step.graphExec)  # the re-instantiated executable, owned by the recording
    assert "digraph" in entry.recording.to_dot()


# -- fuzzer -------------------------------------------------------------------------------------------


def make_dag(plan, kernels, streams):
    """A function running ``plan`` (kernel, src1, src2, dst, lane, spin) over buffers on 3 streams,
    each step ordered after the last step that touched any of its buffers (events)."""

    def dag(*bufs):
        here = cupy.cuda.get_current_stream()
        lanes = [here, *streams]
        last = [here.record() for _ in bufs]
        used = set()
        for name, src1, src2, dst, lane, spin in plan:
            stream = lanes[lane]
            used.add(lane)
            touched = {src1, src2, dst}
            for k in touched:
                stream.wait_event(last[k])
            with stream:
                if name == "copy" and src1 != dst:
                    cupy.cuda.runtime.memcpyAsync(bufs[dst].data.ptr, bufs[src1].data.ptr, bufs[dst].nbytes, 3,
                                                  stream.ptr)
                else:
                    launch(kernels["mix_plain" if name == "copy" else name], bufs[src1], bufs[src2], bufs[dst],
                           spin=spin)
                done = stream.record()
            for k in touched:
                last[k] = done
        for lane in used - {0}:
            here.wait_event(lanes[lane].record())

    return dag


def reset(buffers, values):
    for b, v in zip(buffers, values):
        b[...] = v


def test_random_dags_of_opted_in_and_plain_kernels(kernels):
    """520 random DAGs over three streams: with PDL, without, and eager, bit for bit."""
    from cupygraph.backends.cupy.backend import CupyBackend

    rng = np.random.default_rng(18)
    backend = CupyBackend(0)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    names = ["mix_wait", "mix_wait", "mix_wait_late", "mix_plain", "mix_trigger_only", "mix_raw", "copy"]
    n, slots = 1024, 6
    buffers = [cupy.empty(n, cupy.float32) for _ in range(slots)]
    converted_total = 0
    for trial in range(520):
        plan = [(names[rng.integers(len(names))], int(rng.integers(slots)), int(rng.integers(slots)),
                 int(rng.integers(slots)), int(rng.integers(3)), int(rng.integers(1, 3 * SPIN)))
                for _ in range(int(rng.integers(2, 10)))]
        dag = make_dag(plan, kernels, streams)
        start = [cupy.asarray(rng.standard_normal(n).astype(np.float32)) if k < 3 else
                 cupy.full(n, np.nan, cupy.float32) for k in range(slots)]

        reset(buffers, start)
        dag(*buffers)
        want = [bits(b) for b in buffers]
        recordings = [backend.capture(dag, buffers, {}, num_warmups=0, capture_mode="relaxed", gc_freeze=False,
                                      pdl=setting) for setting in ("auto", "off")]
        for rec in recordings:
            reset(buffers, start)
            rec.launch()
            for k, (got, w) in enumerate(zip([bits(b) for b in buffers], want)):
                np.testing.assert_array_equal(got, w, err_msg=f"trial {trial}, buffer {k}, plan {plan}")
        converted_total += recordings[0].pdl.converted
        assert recordings[1].pdl.converted == 0
        for rec in recordings:
            rec.release()
    backend.synchronize()
    assert converted_total > 100
