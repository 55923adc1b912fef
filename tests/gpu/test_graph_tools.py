"""Issue 17 on a real GPU: topology snapshots from the real graph, NVTX ranges with the nvtx package,
replay times sampled with CUDA events. Replays are compared with eager on fresh random data, bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.testing import assert_graph_topology

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

STEP_SOURCE = r"""
extern "C" __global__ void step(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 0.5f + 1.0f;
}
"""
CONFIG = dict(backend="cupy", capture_sizes=[8, 16])


def make(launches: int, extra_copy: bool = False):
    step = cupy.RawKernel(STEP_SOURCE, "step")

    def pipeline(x):
        n = x.size
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        src = x
        for i in range(launches):
            dst = a if i % 2 == 0 else b
            step(((n + 255) // 256,), (256,), (src, dst, np.int64(n)))
            src = dst
        if extra_copy:
            out = cupy.empty_like(src)
            out.data.copy_from_device_async(src.data, src.nbytes)
            return out
        return src

    return pipeline


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


def same(got, want):
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))


def test_topology_snapshot_round_trips_and_catches_changes(tmp_path):
    rng = np.random.default_rng(0)
    with cupy.cuda.Device(0):
        x = rand(rng, 6, 128)
        path = tmp_path / "pipeline.json"
        graphed = assert_graph_topology(make(32), x, snapshot=path, update=True, config=CONFIG)
        print(path.read_text())
        graph = json.loads(path.read_text())["graphs"]["FULL size=8"]
        assert graph["kernels"] == [["step", 32]] and graph["nodes_by_kind"]["kernel"] == 32
        assert graph["pieces"] == 1 and graph["graph_breaks"] == [] and graph["memcpy"] == []
        fresh = rand(rng, 6, 128)
        same(graphed(fresh), make(32)(fresh))
        assert_graph_topology(make(32), x, snapshot=path, config=CONFIG)  # a new capture: the same graph
        with pytest.raises(pytest.fail.Exception, match=r"kernel `step` now launched 33 times, was 32"):
            assert_graph_topology(make(33), x, snapshot=path, config=CONFIG)
        with pytest.raises(pytest.fail.Exception, match=r"a memcpy node appeared \(") as err:
            assert_graph_topology(make(32, extra_copy=True), x, snapshot=path, config=CONFIG)
        print(err.value)


def test_topology_of_a_piecewise_graph_names_its_graph_break(tmp_path):
    rng = np.random.default_rng(1)
    head, tail = make(4), make(6)
    matmul = cg.graph_break(cupy.matmul)

    def pipeline(x, w):
        return tail(matmul(head(x), w))

    with cupy.cuda.Device(0):
        x, w = rand(rng, 8, 64), rand(rng, 64, 64) / 8
        path = tmp_path / "piecewise.json"
        config = dict(CONFIG, mode="PIECEWISE")
        assert_graph_topology(pipeline, x, w, snapshot=path, update=True, config=config, constant_argnums=(1,))
        print(path.read_text())
        graph = json.loads(path.read_text())["graphs"]["PIECEWISE size=8"]
        assert graph["pieces"] == 2 and graph["graph_breaks"] == ["matmul"]
        assert graph["kernels"] == [["step", 10]]


def test_nvtx_ranges_with_the_real_package_leave_results_exact():
    nvtx = pytest.importorskip("nvtx", reason="the optional nvtx package is not installed")
    from cupygraph.cache.instruments.ranges import NvtxRanges

    rng = np.random.default_rng(2)
    with cupy.cuda.Device(0):
        fn = make(8)
        graphed = cg.jit(fn, config=dict(CONFIG, nvtx=True))
        assert isinstance(graphed.registry.instruments.ranges, NvtxRanges), nvtx
        for rows in (3, 8, 3, 12, 20):  # 20: above the largest size, an eager fallback in a range
            x = rand(rng, rows, 64)
            same(graphed(x), fn(x))
        assert graphed.stats().fallbacks == 1 and graphed.stats().hits == 2


def test_replay_times_sampled_with_cuda_events_are_positive():
    rng = np.random.default_rng(3)
    with cupy.cuda.Device(0):
        fn = make(16)
        graphed = cg.jit(fn, config=dict(CONFIG, replay_timing_every=4, num_warmups=2))
        for _ in range(40):
            x = rand(rng, 8, 4096)
            same(graphed(x), fn(x))
        cupy.cuda.Device(0).synchronize()
        (entry,) = graphed.registry.entries()
        timing = entry.timing
        replay, eager = timing.replay_s(), timing.eager_s()
        print(f"sampled replays: {timing.replay_samples}, mean {replay * 1e6:.1f} us; eager (last warm-up) "
              f"{eager * 1e6:.1f} us; capture {entry.capture_time * 1e3:.2f} ms")
        assert timing.replay_samples >= 5 and replay > 0 and eager > 0
