"""switch on a CUDA SWITCH conditional node, and the pre-flight check of conditional bodies, on a real GPU.

Every graphed result is compared bit for bit with the same function run eagerly, on fresh random data,
with the graph's static outputs poisoned (NaN) before each replay so an element a replay fails to write
shows up. Each index in range, out of range on both sides (negative, at or past the branch count, and an
int64 that truncated to 32 bits would select a branch), a while_loop with a switch inside, and what
``dot``/``inspect``/topology show of the node. Needs CUDA 12.8+ (driver and runtime) and cuda-bindings;
skipped with the reason where SWITCH nodes are unavailable. The accepted body node kinds (kernel, memset,
memcpy, nested conditionals) capture; a host node in a body is refused before instantiation with the
user's line.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import assert_same_array, poison_outputs  # noqa: E402

from cupygraph.cli import main  # noqa: E402
from cupygraph.control_flow import loops as cf  # noqa: E402
from cupygraph.diagnostics.topology import function_topology  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT_OF_RANGE = [-1, 3, 4, 2**32 + 1, 2**32, -(2**63), 2**40]


@pytest.fixture(autouse=True)
def switch_nodes():
    reason = cf.switch_nodes_unavailable_reason()
    if reason is not None:
        pytest.skip(f"SWITCH graph nodes unavailable: {reason}")


def graphed(fn, batch_argnums=(0,), **config):
    g = cg.jit(fn, config=dict(on_capture_error="raise", **config), batch_argnums=batch_argnums)
    assert g.backend.name == "cupy"
    return g


def rand(rng, *shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float32))


def route(index, x):
    """Three ways to transform x; an index out of range leaves the -7 the output starts with."""
    out = cupy.full_like(x, -7.0)
    cg.switch(index, [lambda: cupy.multiply(x, 2.0, out=out),
                      lambda: cupy.add(x, 100.0, out=out),
                      lambda: cupy.multiply(x, x, out=out)])
    return out


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, np.uint64])
def test_each_index_replays_as_eager_in_range_and_out_of_range(dtype):
    rng = np.random.default_rng(11)
    g = graphed(route, batch_argnums=(1,), capture_sizes=[8])
    info = np.iinfo(dtype)
    values = [0, 1, 2, *(v for v in OUT_OF_RANGE if info.min <= v <= info.max), 2, 0, 1]
    for value in values:
        index = cupy.asarray(np.array([value], dtype=dtype))
        x = rand(rng, 8, 33)
        poison_outputs(g, cupy)
        got = g(index, x)
        assert_same_array(got, route(index, x))
        if not 0 <= value < 3:
            assert bool((got == -7.0).all())  # no branch ran
    stats = g.stats()
    assert stats.captures == 1 and stats.fallbacks == 0 and stats.hits == len(values) - 1
    assert function_topology(g)["FULL size=8"]["conditional"] == ["switch, 3 branches"]


def test_a_zero_dimensional_index_and_one_branch():
    rng = np.random.default_rng(12)

    def one(index, x):
        out = cupy.zeros_like(x)
        cg.switch(index, [lambda: cupy.negative(x, out=out)])
        return out

    g = graphed(one, batch_argnums=(1,), capture_sizes=[4])
    for value in (0, 1, -1, 0):
        index, x = cupy.asarray(np.array(value, np.int32)), rand(rng, 4, 5)
        poison_outputs(g, cupy)
        assert_same_array(g(index, x), one(index, x))
    assert g.stats().captures == 1


def test_raw_stream_capture_without_jit():
    """The mechanism alone: CuPy's own capture, one SWITCH node, replays with new indices."""
    index = cupy.zeros(1, cupy.int64)
    x = cupy.arange(4, dtype=cupy.float32)
    out = cupy.zeros(4, cupy.float32)
    branches = [lambda: cupy.multiply(x, 2, out=out), lambda: cupy.add(x, 1, out=out)]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        cg.switch(index, branches)  # eager first: compiles the kernels, so nothing is compiled mid-capture
        stream.begin_capture()
        try:
            out.fill(-1)
            cg.switch(index, branches)
        finally:
            graph = stream.end_capture()
    for value, want in ((1, [1, 2, 3, 4]), (0, [0, 2, 4, 6]), (5, [-1] * 4), (-3, [-1] * 4), (1, [1, 2, 3, 4])):
        index.fill(value)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(out), np.array(want, np.float32))


def machine(n, x):
    """A while_loop with a switch inside: a state machine whose branch the data chooses every iteration."""
    state = cupy.zeros(1, cupy.int32)
    acc = x.copy()

    def body():
        cg.switch(state, [lambda: (cupy.add(state, 2, out=state), cupy.multiply(acc, 0.5, out=acc)),
                          lambda: (cupy.subtract(state, 1, out=state), cupy.add(acc, 1.0, out=acc)),
                          lambda: (cupy.subtract(state, 1, out=state), cupy.sin(acc, out=acc))])

    steps = cupy.zeros(1, cupy.int32)

    def counted():
        body()
        cupy.add(steps, 1, out=steps)

    iters = cg.while_loop(lambda: steps < n, counted)
    return iters, acc, state


def test_a_while_loop_with_a_switch_inside_matches_eager():
    rng = np.random.default_rng(13)
    g = graphed(machine, batch_argnums=(1,), capture_sizes=[8])
    for n in (0, 1, 5, 12, 3):
        count = cupy.asarray(np.array([n], np.int32))
        x = rand(rng, 8, 17)
        poison_outputs(g, cupy)
        got, want = g(count, x), machine(count, x)
        assert int(got[0]) == int(want[0]) == n
        assert_same_array(got[1], want[1])
        assert_same_array(got[2], want[2])
    stats = g.stats()
    assert stats.captures == 1 and stats.fallbacks == 0
    assert function_topology(g)["FULL size=8"]["conditional"] == ["while, 1 body", "switch, 3 branches"]


def test_piecewise_pieces_each_with_a_switch_replay_as_eager():
    """Each PIECEWISE piece is checked and instantiated on its own (``end_piece``): a switch in each."""
    rng = np.random.default_rng(16)
    doubled = cg.graph_break(lambda v: v * 2)

    def two_pieces(index, x):
        return route(index, doubled(route(index, x)))

    g = graphed(two_pieces, batch_argnums=(1,), capture_sizes=[8], mode="PIECEWISE")
    for value in (2, 0, -1, 1, 5, 2):
        index, x = cupy.asarray(np.array([value], np.int32)), rand(rng, 8, 6)
        poison_outputs(g, cupy)
        assert_same_array(g(index, x), two_pieces(index, x))
    found = function_topology(g)["PIECEWISE size=8"]
    assert found["pieces"] == 2 and found["conditional"] == ["switch, 3 branches"] * 2
    assert g.stats().captures == 1 and g.stats().fallbacks == 0


def test_dot_and_inspect_show_the_switch_node(capsys, tmp_path):
    rng = np.random.default_rng(14)
    g = graphed(route, batch_argnums=(1,), capture_sizes=[8])
    g(cupy.asarray(np.array([1], np.int64)), rand(rng, 8, 3))
    dot = g.to_dot(8)
    print(dot)
    assert dot.startswith("digraph") and "switch, 3 branches" in dot
    assert "  FULL size=8: switch, 3 branches" in g.describe().splitlines()

    script = tmp_path / "switching.py"
    script.write_text(textwrap.dedent("""
        import cupy, numpy as np, cupygraph as cg

        def route(index, x):
            out = cupy.zeros_like(x)
            cg.switch(index, [lambda: cupy.add(x, 1, out=out), lambda: cupy.add(x, 2, out=out)])
            return out

        f = cg.jit(route, batch_argnums=(1,), config=dict(capture_sizes=[4], on_capture_error="raise"))
        for value in (0, 1, 2):
            f(cupy.asarray(np.array([value])), cupy.ones((4, 3), cupy.float32))
    """))
    assert main(["inspect", "--script", str(script)]) == 0
    assert "FULL size=4: switch, 2 branches" in capsys.readouterr().out
    assert main(["dot", "--script", str(script), "-o", str(tmp_path / "g.dot")]) == 0
    assert "switch, 2 branches" in (tmp_path / "g.dot").read_text()


def test_the_node_kinds_a_body_may_hold_capture_and_replay_as_eager():
    """Kernel, memset (fill(0)), memcpy (a device-to-device copy) and nested conditional nodes in bodies:
    the pre-flight check lets them through and the driver instantiates the graph."""
    rng = np.random.default_rng(15)

    def bodies(index, x):
        out = cupy.empty_like(x)
        scratch = cupy.empty_like(x)
        flag = cupy.zeros(1, cupy.int32)

        def zero_then_copy():
            scratch.fill(0)  # a memset node
            out.data.copy_from_device_async(x.data, x.nbytes)  # a memcpy node
            cupy.add(out, scratch, out=out)

        def nested():
            cupy.multiply(x, 3.0, out=out)
            cg.cond(flag == 0, lambda: cupy.add(out, 1.0, out=out))  # an IF node in a SWITCH body
            cg.while_loop(lambda: flag < 2, lambda: cupy.add(flag, 1, out=flag))  # and a WHILE node

        cg.switch(index, [zero_then_copy, nested])
        return out

    g = graphed(bodies, batch_argnums=(1,), capture_sizes=[8])
    for value in (0, 1, 1, 0):
        index, x = cupy.asarray(np.array([value], np.int32)), rand(rng, 8, 9)
        poison_outputs(g, cupy)
        assert_same_array(g(index, x), bodies(index, x))
    stats = g.stats()
    assert stats.captures == 1 and stats.fallbacks == 0
    found = function_topology(g)["FULL size=8"]
    assert found["nodes_by_kind"]["memset"] >= 1 and found["nodes_by_kind"]["memcpy"] >= 1
    assert found["conditional"] == ["switch, 2 branches", "if, 1 body", "while, 1 body"]


def test_a_host_node_in_a_body_is_refused_before_instantiation_with_the_users_line():
    """Run in a subprocess: the capture is ended without instantiating the refused graph, and the process
    must stay usable (a fallback runs eagerly, a later capture works)."""
    code = textwrap.dedent("""
        import cupy, numpy as np, cupygraph as cg

        def note(arg):
            pass

        def fn(n):
            x = cupy.zeros(1, cupy.int32)
            def body():
                cupy.add(x, 1, out=x)
                cupy.cuda.get_current_stream().launch_host_func(note, 0)  # a host node in the body
            return x, cg.while_loop(lambda: x < n, body)

        strict = cg.jit(fn, config=dict(on_capture_error="raise"))
        try:
            strict(cupy.asarray([5], dtype=cupy.int32))
        except cg.CaptureError as err:
            message = str(err)
        else:
            raise AssertionError("the host node was not refused")
        print(message)
        assert ("a node CUDA refuses in a while_loop/cond/switch body: the body of the "
                "while_loop (at <string>:") in message, message
        assert "holds a host node" in message and "recorded after kernel" in message, message
        assert "cudaError" not in message and "CUDA_ERROR" not in message, message

        fallback = cg.jit(fn)
        x, iters = fallback(cupy.asarray([5], dtype=cupy.int32))
        assert int(x[0]) == 5 and int(iters) == 5
        assert fallback.stats().fallbacks_by_reason["node_refused_in_conditional_body"] >= 1
        again = cg.jit(lambda n: cg.while_loop(lambda: n < 10, lambda: cupy.add(n, 1, out=n)),
                       config=dict(on_capture_error="raise"))
        assert int(again(cupy.asarray([2], dtype=cupy.int32))) == 8 and again.stats().captures == 1
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr
