"""Helpers and fixtures for testing CuPy pipelines under cupygraph: replay equals eager, capturability,
statistics, leaks and memory poisoning."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import numpy as np
import pytest

from ..api.jit import GraphedFunction, jit, live_functions, on_creation, resolve_config
from ..cache import CUDAGraphStats
from ..config.model import CUDAGraphConfig
from ..errors import CaptureError
from ..pytree import flatten

# -- helpers ---------------------------------------------------------------------------------------


def _xp_of(array: Any) -> Any:
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def _random_like(array: Any, rows: Optional[int], rng: np.random.Generator) -> Any:
    """Fresh random data (never zeros) shaped like ``array``, with ``rows`` rows when given."""
    shape = tuple(array.shape) if rows is None else (rows, *array.shape[1:])
    dtype = np.dtype(array.dtype)
    if dtype.kind == "f" or dtype.kind == "c":
        host = rng.standard_normal(shape).astype(dtype)
    elif dtype.kind == "b":
        host = rng.random(shape) < 0.5
    else:
        info = np.iinfo(dtype)
        host = rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True).astype(dtype)
    return _xp_of(array).asarray(host)


def _poison(graphed: GraphedFunction) -> None:
    """Fill every static output with a sentinel, so an element a replay does not write shows up."""
    for entry in graphed.registry.entries():
        leaves, _ = flatten(entry.cudagraph.outputs, graphed.backend.is_array)
        for leaf in leaves:
            if not graphed.backend.is_array(leaf):
                continue
            kind = np.dtype(leaf.dtype).kind
            leaf.fill(np.nan if kind in "fc" else (True if kind == "b" else -12345))


def _to_numpy(value: Any) -> Any:
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) else np.asarray(value)


def _compare(got: Any, want: Any, rtol: float, atol: float, where: str) -> None:
    got_leaves, got_spec = flatten(got, lambda v: hasattr(v, "shape"))
    want_leaves, want_spec = flatten(want, lambda v: hasattr(v, "shape"))
    if got_spec != want_spec or len(got_leaves) != len(want_leaves):
        pytest.fail(f"{where}: the graphed function returned a different structure than the eager one")
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = _to_numpy(g), _to_numpy(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            pytest.fail(f"{where}: output {i} is {g.dtype}{list(g.shape)}, eager gives {w.dtype}{list(w.shape)}")
        if rtol == 0 and atol == 0:
            if not np.array_equal(g, w, equal_nan=False):
                bad = int(np.count_nonzero(g != w))
                pytest.fail(f"{where}: output {i} differs from eager in {bad} of {g.size} elements (bit for bit)")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{where}: output {i}")


def assert_graph_matches_eager(
    fn: Callable[..., Any],
    *args: Any,
    sizes: Optional[Sequence[int]] = None,
    rtol: float = 0.0,
    atol: float = 0.0,
    config: Any = None,
    batch_argnums: Sequence[int] = (0,),
    seed: int = 0,
    **jit_options: Any,
) -> GraphedFunction:
    """Capture ``fn``, replay it on fresh random inputs and compare with eager (bit for bit by default).

    ``args`` are examples: the arrays at ``batch_argnums`` are redrawn with each size in ``sizes``
    (default: their own batch size and a few around it), other arrays are redrawn with their own
    shape, and non-arrays are passed as they are. Outputs are poisoned before each replay.
    Returns the graphed function (for its stats).
    """
    graphed = jit(fn, config=config, batch_argnums=tuple(batch_argnums), **jit_options)
    rng = np.random.default_rng(seed)
    first = args[batch_argnums[0]]
    chosen = list(sizes) if sizes is not None else sorted({1, max(1, first.shape[0] - 1), first.shape[0]})
    for size in chosen:
        for attempt in ("capture", "replay"):
            call = [
                _random_like(a, size if i in batch_argnums else None, rng)
                if hasattr(a, "shape") and hasattr(a, "dtype") else a
                for i, a in enumerate(args)
            ]
            if attempt == "replay":
                _poison(graphed)
            where = f"{getattr(fn, '__name__', 'fn')} at batch {size} ({attempt})"
            _compare(graphed(*call), fn(*call), rtol, atol, where)
    reasons = graphed.stats().fallbacks_by_reason
    if reasons:
        pytest.fail(f"{getattr(fn, '__name__', 'fn')} ran eagerly instead of replaying: {dict(reasons)}")
    return graphed


def assert_capturable(fn: Callable[..., Any], *args: Any, config: Any = None, **jit_options: Any) -> None:
    """Fail with the reason when capturing ``fn(*args)`` would fall back to eager."""
    if isinstance(config, dict):
        merged: Any = {**config, "on_capture_error": "raise"}
    else:
        merged = CUDAGraphConfig(**{**resolve_config(config).to_dict(), "on_capture_error": "raise"})
    graphed = jit(fn, config=merged, **jit_options)
    try:
        graphed(*args)
    except CaptureError as err:
        pytest.fail(f"{getattr(fn, '__name__', 'fn')} is not capturable: {err}")
    if graphed.registry.num_graphs() == 0:
        reasons = dict(graphed.stats().fallbacks_by_reason)
        pytest.fail(f"{getattr(fn, '__name__', 'fn')} was not captured: {reasons or 'no graph mode for this batch'}")


# -- fixtures --------------------------------------------------------------------------------------


class GraphStats:
    """Statistics of the jitted functions created during one test (kept alive until it ends)."""

    def __init__(self) -> None:
        self._created: list[GraphedFunction] = []

    def _add(self, fn: GraphedFunction) -> None:
        self._created.append(fn)

    def functions(self) -> list[GraphedFunction]:
        return list(self._created)

    def total(self) -> CUDAGraphStats:
        """All counters of this test's functions, summed."""
        total = CUDAGraphStats()
        for f in self.functions():
            total.merge(f.stats())
        return total


@pytest.fixture
def graph_stats() -> Iterator[GraphStats]:
    """Stats of the jitted functions the test creates (functions that existed before are reset)."""
    for f in live_functions():
        f.stats().reset()
    recorder = GraphStats()
    unsubscribe = on_creation(recorder._add)
    try:
        yield recorder
    finally:
        unsubscribe()


def _default_pool_used() -> int:
    try:
        import cupy
    except Exception:
        return 0
    return int(cupy.get_default_memory_pool().used_bytes())


@pytest.fixture
def cupygraph_leak_check() -> Iterator[None]:
    """After the test, clearing its jitted functions frees every graph and pool byte they held,
    and CuPy's default pool holds no more than before (arrays the test kept are its own)."""
    created: list[GraphedFunction] = []
    unsubscribe = on_creation(created.append)
    gc.collect()
    default_before = _default_pool_used()
    try:
        yield
    finally:
        unsubscribe()
    leaks = []
    for f in created:
        f.clear()
        if f.registry.num_graphs() or f.backend.pool_bytes():
            leaks.append(f"{f.__name__}: {f.registry.num_graphs()} graphs, {f.backend.pool_bytes()} pool bytes")
    gc.collect()
    grown = _default_pool_used() - default_before
    if leaks:
        pytest.fail("cupygraph leak check: " + "; ".join(leaks))
    if grown > 0:
        pytest.fail(f"cupygraph leak check: CuPy's default pool holds {grown} more bytes than before the test")


# -- memory poisoning (issue 19) -------------------------------------------------------------------


def assert_graph_memory_safe(
    fn: Callable[..., Any],
    *args: Any,
    sizes: Optional[Sequence[int]] = None,
    replays: int = 3,
    watch: Sequence[Any] = (),
    between: Optional[Callable[[], Any]] = None,
    rtol: float = 0.0,
    atol: float = 0.0,
    config: Any = None,
    batch_argnums: Sequence[int] = (0,),
    seed: int = 0,
    **jit_options: Any,
) -> GraphedFunction:
    """Replay ``fn``'s graphs under memory poisoning; fail when they touch memory they do not own.

    ``fn`` is a function (jitted here with ``config`` and the options) or a ``GraphedFunction``.
    ``args`` are examples, redrawn with fresh random data as in ``assert_graph_matches_eager``.
    For each size: capture, then ``replays`` times: run ``between()`` (what the rest of a program
    does meanwhile: clear a cache, drop an array), poison — the free blocks of CuPy's default
    pool (current stream) become sentinel arrays filled with NaN bytes and kept, the free blocks
    of the function's own pool are filled and handed back — compute eager, fill the static
    outputs, replay, and check that no sentinel and no array in ``watch`` changed (only the
    graph's outputs may) and that the outputs equal eager (bit for bit unless ``rtol``/``atol``).
    A CUDA error during the replays propagates. Returns the graphed function.
    """
    from .memcheck import FreeMemoryPoison, poison_family

    graphed = fn if isinstance(fn, GraphedFunction) else jit(
        fn, config=config, batch_argnums=tuple(batch_argnums), **jit_options)
    eager: Callable[..., Any] = vars(graphed)["__wrapped__"] if isinstance(fn, GraphedFunction) else fn
    batch_argnums = graphed.batch_argnums
    name = getattr(eager, "__name__", "fn")
    rng = np.random.default_rng(seed)
    first = args[batch_argnums[0]]
    chosen = list(sizes) if sizes is not None else [first.shape[0]]

    def draw(size: int) -> list[Any]:
        return [_random_like(a, size if i in batch_argnums else None, rng)
                if hasattr(a, "shape") and hasattr(a, "dtype") else a for i, a in enumerate(args)]

    for size in chosen:
        graphed(*draw(size))
        for attempt in range(replays):
            if between is not None:
                between()
            call = draw(size)
            before = [_to_numpy(w).copy() for w in watch]
            poison = FreeMemoryPoison()
            try:
                poison_family(graphed.backend)
                poison.take()
                # Eager runs after the poisoning: what it allocates cannot take the freed memory a
                # faulty graph still uses, so such a graph writes into a sentinel, not into eager's data.
                want = eager(*call)
                _poison(graphed)
                got = graphed(*call)
                graphed.backend.synchronize()
                problems = poison.changed()
            finally:
                poison.release()
            where = f"{name} at batch {size} (replay {attempt + 1} under memory poisoning)"
            problems += [f"watched array {i} changed" for i, (w, old) in enumerate(zip(watch, before))
                         if not np.array_equal(_to_numpy(w), old, equal_nan=True)]
            if problems:
                pytest.fail(f"{where}: the replay wrote outside its outputs:\n  " + "\n  ".join(problems))
            _compare(got, want, rtol, atol, where)
    reasons = graphed.stats().fallbacks_by_reason
    if reasons:
        pytest.fail(f"{name} ran eagerly instead of replaying: {dict(reasons)}")
    return graphed


@pytest.fixture
def cupygraph_memory_poisoning() -> Iterator[Callable[..., GraphedFunction]]:
    """``assert_graph_memory_safe`` for a test; the functions it jits are cleared afterwards."""
    created: list[GraphedFunction] = []
    unsubscribe = on_creation(created.append)
    try:
        yield assert_graph_memory_safe
    finally:
        unsubscribe()
        for f in created:
            f.clear()


