"""PDL for kernels built with CuPy's own classes, on a real GPU (issue 30).

The issue's chain: 100 dependent kernels over 1,024 floats, each opening with
``griddepcontrol.launch_dependents; griddepcontrol.wait`` (inline PTX, or the shipped header
``#include``d), built with plain ``cupy.RawModule`` / ``cupy.ElementwiseKernel``: no
``cupygraph.pdl_kernel``. Each graph is compared bit for bit with the same graph under
``pdl="off"`` and with the function run eagerly, on fresh random data; each raw kernel spins a
little, so a consumer that started early without waiting would read stale data. The sources are in
tests/pdl_chain_sources.py, where a CPU test compiles and scans them too. Needs sm_90+.
"""

from __future__ import annotations

import numpy as np
import pytest
from pdl_chain_sources import HEADER, HEADER_OPTIONS, LOOP_PREP, PLAIN, WAITING

import cupygraph as cg

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("sm90_device")]
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="needs cuda-bindings")

N = 1024
LENGTH = 100




def launch(kernel, x, y, spin=8):
    kernel(((N + 255) // 256,), (256,), (x, y, np.int32(N), np.int32(spin)))


def make_chain(step):
    """100 dependent launches of ``step(x, y)``, ping-ponging between two buffers."""

    def chain(x):
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        src = x
        for i in range(LENGTH):
            dst = a if i % 2 == 0 else b
            step(src, dst)
            src = dst
        return src

    return chain


def bits(a):
    return cupy.asnumpy(a).view(np.uint32)


def run_three_ways(fn, rng, replays=3):
    """fn graphed with PDL, graphed without, and eager: bit-identical on fresh data each replay."""
    pdl = cg.jit(fn, config=dict(on_capture_error="raise", pdl="auto"))
    plain = cg.jit(fn, config=dict(on_capture_error="raise", pdl="off"))
    for _ in range(replays):
        x = cupy.asarray(rng.standard_normal((1, N)).astype(np.float32))
        want = bits(fn(x))
        for f in (pdl, plain):
            np.testing.assert_array_equal(bits(f(x)), want)
    for f in (pdl, plain):
        stats = f.stats()
        assert stats.captures == 1 and stats.fallbacks == 0 and stats.hits == replays - 1, stats
    assert plain.stats().pdl_edges_converted == 0
    return pdl


def not_converted(f):
    (entry,) = f.registry.entries()
    return entry.recording.pdl.not_converted


@pytest.mark.parametrize("source, options", [(WAITING, ()), (HEADER, HEADER_OPTIONS)], ids=["inline_ptx", "header"])
def test_a_rawmodule_chain_that_waits_converts_every_edge(source, options):
    step = cupy.RawModule(code=source, options=options).get_function("chain_step")
    pdl = run_three_ways(make_chain(lambda x, y: launch(step, x, y)), np.random.default_rng(30))
    assert pdl.stats().pdl_edges_converted == LENGTH - 1
    assert pdl.stats().pdl_edges_kept_by_reason == {}


def test_the_same_chain_without_the_wait_converts_nothing_and_says_it_does_not_wait():
    step = cupy.RawModule(code=PLAIN).get_function("chain_step")
    pdl = run_three_ways(make_chain(lambda x, y: launch(step, x, y)), np.random.default_rng(31))
    assert pdl.stats().pdl_edges_converted == 0
    assert pdl.stats().pdl_edges_kept_by_reason == {"consumer_does_not_wait": LENGTH - 1}
    assert "no griddepcontrol.wait" in not_converted(pdl)["chain_step"]


class Kept:
    """A kernel kept where the capture's walk over the function does not look (a class attribute):
    found among the live objects instead."""

    step = None


def test_a_kernel_the_function_does_not_reach_is_found_among_the_live_objects():
    Kept.step = cupy.RawKernel(WAITING, "chain_step", options=("-DKEPT_ON_A_CLASS",))
    try:
        pdl = run_three_ways(make_chain(lambda x, y: launch(Kept.step, x, y)), np.random.default_rng(32))
    finally:
        Kept.step = None
    assert pdl.stats().pdl_edges_converted == LENGTH - 1


def test_an_elementwise_kernel_chain_that_waits_before_its_loop_converts():
    step = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 0.999f + 0.5f", "chain_ew",
                                  loop_prep=LOOP_PREP)
    pdl = run_three_ways(make_chain(lambda x, y: step(x, y)), np.random.default_rng(33))
    assert pdl.stats().pdl_edges_converted == LENGTH - 1


def cubin_of(source: str, name: str, arch: str) -> bytes:
    def check(result):
        parts = result if isinstance(result, tuple) else (result,)
        assert parts[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, parts[0]
        return parts[1] if len(parts) > 1 else None

    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        check(nvrtc.nvrtcCompileProgram(prog, 1, [f"--gpu-architecture=sm_{arch}".encode()]))
        buf = b" " * check(nvrtc.nvrtcGetCUBINSize(prog))
        check(nvrtc.nvrtcGetCUBIN(prog, buf))
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def test_kernels_that_cannot_be_scanned_keep_plain_edges_and_say_not_scanned(tmp_path, sm90_device):
    path = tmp_path / "chain_step.cubin"
    path.write_bytes(cubin_of(WAITING, "chain_step.cu", str(min(int(sm90_device.compute_capability), 90))))
    from_file = cupy.RawModule(path=str(path)).get_function("chain_step")  # waits, but its source is unknown
    waiting = cupy.RawModule(code=WAITING).get_function("chain_step")

    def mixed(x):
        a, b, c = cupy.empty_like(x), cupy.empty_like(x), cupy.empty_like(x)
        launch(waiting, x, a)
        launch(from_file, a, b)   # not scanned: loaded from a file
        launch(waiting, b, c)     # converted: it waits for the kernel before it, whatever that is
        return c * 2.0            # CuPy's ufunc: no object holds its source, not scanned

    pdl = run_three_ways(mixed, np.random.default_rng(34))
    assert pdl.stats().pdl_edges_converted == 1
    assert pdl.stats().pdl_edges_kept_by_reason == {"consumer_not_scanned": 2}
    reasons = not_converted(pdl)
    assert "loaded from a file" in reasons["chain_step"]
    assert any(why.startswith("not scanned: no live cupy.RawKernel") for why in reasons.values()), reasons
