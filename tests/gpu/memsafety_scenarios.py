"""GPU scenarios of issue 19, one per process: ``python tests/gpu/memsafety_scenarios.py NAME``.

Each runs in a fresh process (tests/gpu/test_memory_safety.py starts them), so a replay that
kills the CUDA context cannot take the rest of the suite with it. A scenario prints ``OK NAME``
when everything it checks held and exits 0; any failed check raises (exit 1). ``dump`` is not a
test: it prints what the graph walker sees in a cuFFT graph and what the audit costs a capture.

Comparisons use fresh random data, poison the outputs first, and are bit for bit against an
eager run with the same kind of cuFFT plan.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings

import cupy
import numpy as np

import cupygraph as cg
from cupygraph.backends.guards.foreign import ForeignMemoryError, ForeignMemoryWarning
from cupygraph.testing import assert_graph_memory_safe
from cupygraph.testing.memcheck import FreeMemoryPoison

SHAPE = (8, 4099)  # a prime length: Bluestein, with a work area of about 1.1 MB
FFT_ONLY = dict(capture_sizes=[8])


def complex_random(rng: np.random.Generator, shape: tuple[int, ...] = SHAPE) -> cupy.ndarray:
    host = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return cupy.asarray(host.astype(np.complex64))


def fft(x: cupy.ndarray) -> cupy.ndarray:
    return cupy.fft.fft(x, axis=1)


def recording(graphed: cg.GraphedFunction):
    (entry,) = graphed.registry.entries()
    return entry.cudagraph


def poison_outputs(graphed: cg.GraphedFunction) -> None:
    out = recording(graphed).outputs
    out.view(np.uint32).fill(0xFFFFFFFF)


def same_bits(got: cupy.ndarray, want: cupy.ndarray) -> bool:
    return got.shape == want.shape and bool(cupy.array_equal(got.view(cupy.uint8), want.view(cupy.uint8)))


def cached_keys(length: int) -> list[tuple]:
    return [key for key, _ in cupy.fft.config.get_plan_cache() if key and key[0] == length]


def capture_fft_after_an_eager_one(rng: np.random.Generator) -> cg.GraphedFunction:
    """The issue's setup: the plan of (8, 4099) is in CuPy's cache before the graph is made."""
    fft(complex_random(rng))
    assert len(cached_keys(4099)) == 1, "the eager FFT should have cached its plan"
    (user_plan,) = [node.plan for key, node in cupy.fft.config.get_plan_cache() if key[0] == 4099]
    graphed = cg.jit(fft, config=FFT_ONLY)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForeignMemoryWarning)  # a safe graph must not warn
        graphed(complex_random(rng))
    rec = recording(graphed)
    assert len(rec.held) == 1 and rec.held[0] is not user_plan, "the graph must hold a plan of its own"
    assert cached_keys(4099), "the caller's plan must be back in CuPy's cache"
    if rec.audit is not None:
        print("audit owners:", rec.audit.owners(), "unaudited:", len(rec.audit.unaudited))
        assert rec.audit.foreign() == [], [r.describe() for r in rec.audit.foreign()]
    return graphed


def evict(kind: str) -> None:
    cache = cupy.fft.config.get_plan_cache()
    if kind == "clear":
        cache.clear()
    else:  # LRU: 17 FFTs of other lengths push the plan out of a 16-plan cache
        for n in range(4100, 4117):
            fft(cupy.ones((8, n), dtype=cupy.complex64))
    cupy.cuda.Device().synchronize()
    assert not cached_keys(4099), "the plan should have left CuPy's cache"


def replay_against_eager(graphed: cg.GraphedFunction, rng: np.random.Generator, rounds: int,
                         poison: FreeMemoryPoison) -> None:
    for i in range(rounds):
        x = complex_random(rng)
        want = fft(x)
        cupy.cuda.Device().synchronize()
        poison_outputs(graphed)
        got = graphed(x)
        cupy.cuda.Device().synchronize()
        assert same_bits(got, want), f"replay {i} differs from eager"
        changed = poison.changed()
        assert not changed, "a replay wrote into freed memory:\n" + "\n".join(changed)


def scenario_fft(kind: str) -> None:
    rng = np.random.default_rng(19)
    graphed = capture_fft_after_an_eager_one(rng)
    evict(kind)
    poison = FreeMemoryPoison()
    taken = poison.take()  # allocations that reuse the freed memory (the old work area among them)
    print(f"sentinels: {len(poison.sentinels)} blocks, {taken} bytes")
    assert taken >= 1_000_000, "the evicted plan's work area should be free for reuse"
    replay_against_eager(graphed, rng, 5, poison)
    poison.release()
    # The user-facing check, with the cache cleared between replays.
    assert_graph_memory_safe(graphed, complex_random(rng), replays=3,
                             between=cupy.fft.config.get_plan_cache().clear)
    assert graphed.stats().fallbacks == 0


def scenario_fft_fresh() -> None:
    """The first thing this process does is the issue's sequence, then memory churn."""
    rng = np.random.default_rng(7)
    graphed = capture_fft_after_an_eager_one(rng)
    evict("clear")
    keep: list[tuple[float, cupy.ndarray]] = []
    for i in range(40):
        # Arrays of the work area's size take the freed blocks; each holds its own value.
        keep.append((float(i), cupy.full(1_105_920 // 4, float(i), dtype=cupy.float32)))
        x = complex_random(rng)
        want = fft(x)
        poison_outputs(graphed)
        got = graphed(x)
        cupy.cuda.Device().synchronize()
        assert same_bits(got, want), f"replay {i} differs from eager"
        assert all(bool((a == v).all()) for v, a in keep), f"an unrelated array changed at replay {i}"
        if i % 3 == 0:
            keep.pop(0)  # back to the pool: the next round's array may take its memory
    cupy.cuda.Device().synchronize()
    assert float((cupy.arange(10) * 2).sum()) == 90.0  # the context is alive


@contextlib.contextmanager
def _shared_plan_cache(held):
    yield  # the fix bypassed: warm-up and capture use CuPy's cache as it is


def scenario_fft_unsafe() -> None:
    """With the plan-cache isolation bypassed, the poisoning helper must fail."""
    import cupygraph.backends.cupy.backend as backend_module

    backend_module.isolated_plan_cache = _shared_plan_cache
    rng = np.random.default_rng(3)
    fft(complex_random(rng))
    graphed = cg.jit(fft, config=FFT_ONLY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed(complex_random(rng))
    print("warnings at capture:", [str(w.message).splitlines()[0] for w in caught])
    rec = recording(graphed)
    if rec.audit is not None:
        print("audit owners:", rec.audit.owners(), [r.describe() for r in rec.audit.foreign()][:3])
    try:
        assert_graph_memory_safe(graphed, complex_random(rng), replays=3,
                                 between=cupy.fft.config.get_plan_cache().clear)
    except BaseException as err:  # pytest's Failed, or the CUDA error of a dead context
        print(f"HELPER FAILED: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return
    raise AssertionError("the poisoning helper passed a graph that writes into a freed cuFFT work area")


def _closure(table: cupy.ndarray):
    def scaled(x):
        return x * table

    return scaled


def _writer(out: cupy.ndarray):
    def stash(x):
        out[...] = x[0]  # writes into an array it does not own
        return x * 2

    return stash


def _rebind(fn, value) -> None:
    (cell,) = fn.__closure__
    cell.cell_contents = value


def scenario_closure() -> None:
    rng = np.random.default_rng(11)
    x = cupy.asarray(rng.standard_normal((8, 4096)).astype(np.float32))
    fresh_table = lambda: cupy.asarray(rng.standard_normal(4096).astype(np.float32))

    # 1. Warning at capture, naming the variable and its address.
    fn = _closure(fresh_table())
    graphed = cg.jit(fn, config=FFT_ONLY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, ForeignMemoryWarning)]
    assert len(messages) == 1 and "closure variable 'table' (float32[4096])" in messages[0], messages
    assert "0x" in messages[0]
    print("warning:", messages[0].splitlines()[1].strip())

    # 2. Kept alive and bound, the graph is safe: the helper passes.
    assert_graph_memory_safe(graphed, x, replays=2)

    # 3. Rebound after capture (the old array freed): the helper fails (reads of poisoned memory).
    try:
        assert_graph_memory_safe(graphed, x, replays=2, between=lambda: _rebind(fn, fresh_table()))
    except BaseException as err:
        print(f"HELPER FAILED (read): {type(err).__name__}: {str(err).splitlines()[0]}")
    else:
        raise AssertionError("the helper passed a graph reading a freed closure array")

    # 4. A graph writing into a closure array that was rebound: the helper sees the sentinel change.
    writer = _writer(cupy.zeros(4096, dtype=cupy.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignMemoryWarning)
        written = cg.jit(writer, config=FFT_ONLY)
        written(x)
    try:
        assert_graph_memory_safe(written, x, replays=2,
                                 between=lambda: _rebind(writer, cupy.zeros(4096, dtype=cupy.float32)))
    except BaseException as err:
        text = str(err)
        print(f"HELPER FAILED (write): {type(err).__name__}: {text.splitlines()[0]}")
        assert "wrote outside its outputs" in text, text
    else:
        raise AssertionError("the helper passed a graph writing into a freed closure array")

    # 5. Debug mode: a replay after the rebinding is refused.
    fn = _closure(fresh_table())
    strict = cg.jit(fn, config=dict(FFT_ONLY, debug=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignMemoryWarning)
        strict(x)
    strict(x)
    _rebind(fn, fresh_table())
    try:
        strict(x)
    except ForeignMemoryError as err:
        assert "closure variable 'table'" in str(err), err
        print("debug error:", str(err)[:120])
    else:
        raise AssertionError("debug mode replayed a graph whose closure array was freed")


def _looped(table: cupy.ndarray):
    def looped(x):
        acc = x.copy()
        count = cupy.zeros(1, dtype=cupy.int32)

        def body():
            cupy.multiply(acc, table, out=acc)  # the only read of ``table``: inside the loop body
            cupy.add(count, 1, out=count)

        cg.while_loop(lambda: count < 3, body)
        return acc

    return looped


def scenario_structure() -> None:
    """The audit walks the bodies of conditional nodes and every piece of a PIECEWISE recording."""
    from cupygraph.control_flow.loops import conditional_nodes_unavailable_reason

    rng = np.random.default_rng(5)
    reason = conditional_nodes_unavailable_reason()
    if reason is None:
        looped = _looped(cupy.asarray(rng.standard_normal(256).astype(np.float32)))
        graphed = cg.jit(looped, config=FFT_ONLY)
        x = cupy.asarray(rng.standard_normal((8, 256)).astype(np.float32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = graphed(x)
        messages = [str(w.message) for w in caught if issubclass(w.category, ForeignMemoryWarning)]
        audit = recording(graphed).audit
        print("loop audit:", audit and audit.owners(), audit and audit.unaudited)
        assert len(messages) == 1 and "closure variable 'table'" in messages[0], messages
        assert same_bits(got, looped(x)), "the loop's replay differs from eager"
        print("conditional body:", messages[0].splitlines()[1].strip())
    else:
        print("conditional nodes unavailable here:", reason)

    doubled = cg.graph_break(lambda y: y * 2)

    def pipeline(x):
        return cupy.fft.ifft(doubled(cupy.fft.fft(x, axis=1)), axis=1)

    graphed = cg.jit(pipeline, config=dict(FFT_ONLY, mode="PIECEWISE"))
    x = complex_random(rng)
    fft(x)  # CuPy's cache holds the plan before the capture, as in the issue
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForeignMemoryWarning)
        graphed(x)
    rec = recording(graphed)
    assert rec.num_pieces == 2 and rec.held, (rec.num_pieces, len(rec.held))
    print("piecewise: pieces", rec.num_pieces, "plans held", len(rec.held), "owners", rec.audit and rec.audit.owners())
    assert_graph_memory_safe(graphed, complex_random(rng), replays=3, between=cupy.fft.config.get_plan_cache().clear)


def scenario_dump() -> None:
    """Calibration: what the walker sees in an FFT graph and an elementwise graph; audit cost."""
    from cupygraph.backends.guards import cupy_audit

    rng = np.random.default_rng(1)
    graphed = cg.jit(lambda x: cupy.fft.fft(x * 2, axis=1) + 1, config=FFT_ONLY)
    graphed(complex_random(rng))
    rec = recording(graphed)
    from cupygraph.backends.driver import bindings

    walker = cupy_audit.NodeAddresses(rec.graphs.all, cupy_audit.library_of)
    drv = bindings()
    for node in walker.nodes:
        print("node", node.kind, node.name[:100], node.library, [hex(w) for w in node.words][:12])
    print("unaudited", walker.unaudited, "owned", walker.owned)
    _, nodes, _ = drv.cuGraphGetNodes(drv.CUgraph(int(rec.graph.graph)), 64)
    for node in nodes:
        if node is None or not int(node):
            continue
        _, kind = drv.cuGraphNodeGetType(node)
        if kind == drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            _, p = drv.cuGraphKernelNodeGetParams(node)
            print("kernel func", int(p.func), "kern", int(p.kern), "params", hex(int(p.kernelParams)),
                  "extra", hex(int(p.extra)))
    print("held plans", len(rec.held), "audit at capture:", rec.audit is not None)
    report, _ = cupy_audit._audit(graphed.backend, rec, rec.graphs.all, graphed.__wrapped__, [], {})
    for ref in report.references:
        print("ref", ref.owner, ref.describe()[:200])
    from cupygraph.kernels import get_kernel

    affine = get_kernel("elementwise.cu", "affine")

    def chain(x):
        y = cupy.empty_like(x)
        for i in range(100):
            affine((16,), (256,), (x, y, np.int64(x.size), np.float32(1.0 + i), np.float32(0.5)))
            x, y = y, x
        return x * 1

    import os

    saved = os.environ.get("CUPYGRAPH_AUDIT")
    try:
        for audit in ("0", "1", "0", "1"):
            os.environ["CUPYGRAPH_AUDIT"] = audit
            timed = cg.jit(chain, config=dict(capture_sizes=[64]))
            x = cupy.asarray(rng.standard_normal((64, 64)).astype(np.float32))
            timed(x)
            first = timed.stats().capture_time_s
            times = []
            for _ in range(5):
                timed.clear()
                start = time.perf_counter()
                timed(x)
                times.append(time.perf_counter() - start)
            print(f"CUPYGRAPH_AUDIT={audit}: first capture {1e3 * first:.2f} ms; first call after clear, median of 5: "
                  f"{1e3 * sorted(times)[2]:.2f} ms (101 kernel nodes)")
    finally:
        if saved is None:  # as it was before the scenario
            os.environ.pop("CUPYGRAPH_AUDIT", None)
        else:
            os.environ["CUPYGRAPH_AUDIT"] = saved
    rec = recording(timed)
    start = time.perf_counter()
    for _ in range(5):
        cupy_audit._audit(timed.backend, rec, rec.graphs.all, chain, [x], {})
    print(f"audit alone: {1e3 * (time.perf_counter() - start) / 5:.2f} ms per 101-node graph")


SCENARIOS = {
    "fft_clear": lambda: scenario_fft("clear"),
    "fft_lru": lambda: scenario_fft("lru"),
    "fft_fresh": scenario_fft_fresh,
    "fft_unsafe": scenario_fft_unsafe,
    "closure": scenario_closure,
    "structure": scenario_structure,
    "dump": scenario_dump,
}

if __name__ == "__main__":
    name = sys.argv[1]
    cupy.cuda.Device(0).use()
    SCENARIOS[name]()
    cupy.cuda.Device().synchronize()
    print(f"OK {name}")
