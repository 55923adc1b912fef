"""The CuPy competitors of ``tools/bench.py``: eager CuPy, bare hand-captured graphs, cupygraph.

cupygraph is used only through its public API (``cupygraph.jit``, its config, ``stats()``, and the
pool size its backend reports).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools.bench_peers import Competitor, NotApplicable


class BareGraph:
    """The floor: a hand-captured CuPy graph at the exact size, one input memcpy, no output copy.

    The graph's blocks come from a private pool, so nothing else is handed memory the graph writes.
    """

    def __init__(self, fn: Callable[[Any], Any], example: Any):
        import cupy

        self.pool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)
        with cupy.cuda.using_allocator(self.pool.malloc):
            self.static_in = cupy.empty_like(example)
            self.static_in[...] = example
            self.graph, self.static_out = self._capture(fn, self.static_in)

    def _capture(self, fn: Callable[[Any], Any], arg: Any) -> tuple[Any, Any]:
        import cupy

        stream = self._stream
        stream.wait_event(cupy.cuda.get_current_stream().record())
        with stream:
            fn(arg)  # warm-up: compile, fill the pool for this stream
            stream.begin_capture()
            out = None
            try:
                out = fn(arg)
            finally:
                graph = stream.end_capture()
        graph.upload(stream)
        stream.synchronize()
        return graph, out

    def load(self, x: Any) -> None:
        import cupy

        cupy.cuda.runtime.memcpyAsync(self.static_in.data.ptr, x.data.ptr, x.nbytes,
                                      cupy.cuda.runtime.memcpyDefault, cupy.cuda.get_current_stream().ptr)

    def __call__(self, x: Any) -> Any:
        self.load(x)
        self.graph.launch()
        return self.static_out

    def nbytes(self) -> int:
        return int(self.pool.total_bytes())


class OwnedOutput:
    """A bare graph that hands the caller an array it owns, as cupygraph's default ``copy`` does:
    what owning the output costs, apart from everything else cupygraph does per call."""

    def __init__(self, graph: BareGraph):
        self.graph = graph

    def __call__(self, x: Any) -> Any:
        import cupy

        out = self.graph(x)
        owned = cupy.empty_like(out)
        cupy.cuda.runtime.memcpyAsync(owned.data.ptr, out.data.ptr, out.nbytes, cupy.cuda.runtime.memcpyDefault,
                                      cupy.cuda.get_current_stream().ptr)
        return owned


class BarePiecewise(BareGraph):
    """The piecewise floor: head graph, eager cuBLAS matmul into a fixed buffer, tail graph."""

    def __init__(self, head: Callable, tail: Callable, w: Any, example: Any):
        import cupy

        self.pool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self.w = w
        with cupy.cuda.using_allocator(self.pool.malloc):
            self.static_in = cupy.empty_like(example)
            self.static_in[...] = example
            self.head, self.mid = self._capture(head, self.static_in)
            self.product = cupy.matmul(self.mid, w)
            self.tail, self.static_out = self._capture(tail, self.product)
        self._matmul = cupy.matmul

    def __call__(self, x: Any) -> Any:
        self.load(x)
        self.head.launch()
        self._matmul(self.mid, self.w, out=self.product)
        self.tail.launch()
        return self.static_out


CUPY_KEYS = ("cupy", "bare", "bare-copy", "jit-copy", "jit-view", "jit-plain", "jit-fused")
POOL_METHOD = "CuPy: bytes of the graph's private MemoryPool (total_bytes)"
JIT_METHOD = "cupygraph: bytes its graph pool holds from the device (backend.pool_bytes)"


def build_cupy(case: Any, key: str, serving: bool, sizes_config: dict) -> Competitor:
    """One CuPy competitor for ``case``; ``sizes_config`` is cupygraph's capture-size config."""
    import cupygraph as cg

    fw = case.frameworks.get("cupy")
    if key == "cupy":
        return Competitor(key, case.cupy_call(), case.cupy_inputs, fw, exact=True)
    if key in ("bare", "bare-copy"):
        params, example = case.cupy_params, case.cupy_inputs[0]
        if case.workload.name == "piecewise":
            head, _, tail = case.workload.cupy_pieces()
            graph: BareGraph = BarePiecewise(head, tail, params[0], example)
        else:
            graph = BareGraph(case.cupy_call(), example)
        call = OwnedOutput(graph) if key == "bare-copy" else graph
        return Competitor(key, call, case.cupy_inputs, fw, exact=True, graph_bytes=graph.nbytes,
                          memory_method=POOL_METHOD)
    if key == "jit-fused":
        fused = case.workload.fused_cupy_fn()
        if fused is None:
            raise NotApplicable(f"{case.workload.name} has no fused CuPy variant")
        fn, params, exact = fused, [], False
    else:
        fn, params, exact = case.eager, case.cupy_params, True
    # jit-plain: the view row with programmatic dependent launch off (plain graph edges), same run.
    config = dict(output_mode="view" if key in ("jit-view", "jit-plain") else "copy", **sizes_config,
                  **case.workload.jit_config, **(dict(pdl="off") if key == "jit-plain" else {}))
    graphed = cg.jit(fn, config=config, constant_argnums=tuple(range(1, 1 + len(params))))
    if serving:
        graphed.warmup(case.cupy_inputs[0], *params, progress=False)

    def note() -> str:
        stats = graphed.stats()
        reasons = getattr(stats, "fallbacks_by_reason", {})
        parts = [f"eager fallbacks: {stats.fallbacks} {dict(reasons)}"] if stats.fallbacks else []
        converted, kept = getattr(stats, "pdl_edges_converted", 0), getattr(stats, "pdl_edges_kept_by_reason", {})
        if converted or kept:  # whether programmatic dependent launch reached this graph's kernels, and why not
            parts.append(f"PDL edges converted: {converted}, kept plain: {dict(kept) or 'none'}")
        return "; ".join(parts)

    call = (lambda x: graphed(x, *params)) if params else graphed
    return Competitor(key, call, case.cupy_inputs, fw, exact=exact, graph_bytes=graphed.backend.pool_bytes,
                      memory_method=JIT_METHOD, note=note)
