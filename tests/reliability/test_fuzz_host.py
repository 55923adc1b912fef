"""Differential fuzzing on the host backend: random pipelines, configs and call sequences.

Each example builds a pipeline from a small set of NumPy ops, a random ``CUDAGraphConfig`` and a
random sequence of calls (batch sizes, dtypes, trailing shapes, static values, in-place updates
and replacements of a constant argument), then checks every result against calling the pipeline
directly:

* bit for bit when the pipeline keeps rows independent (padding rows cannot reach real rows) or
  mixes them only causally (a cumulative sum over the batch: padding rows come last);
* ``allclose`` for pipelines with one sum over the batch, run with ``pad_value=0`` and only
  zero-preserving ops before the sum, so padding rows add exact zeros.

After every call the statistics must add up: hits + misses == calls, captures - evictions ==
graphs held, and the limits (``max_cached_graphs``, ``memory_budget``) hold. Results of
``output_mode="copy"`` must stay unchanged by later calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reliability_helpers import check_stats, record  # noqa: E402
from replay_helpers import poison_outputs  # noqa: E402

import cupygraph as cg  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    fn: Callable[[np.ndarray], np.ndarray]
    zero_preserving: bool  # maps an all-zero row to an all-zero row
    kind: str  # "elementwise", "row", "causal" (rows mix only forward), "sum" (rows mix)


def _rowwise(f: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    # 1-D batches have no trailing axis to work along: the op returns its input (an alias).
    return lambda x: f(x) if x.ndim > 1 else x


OPS = [
    Op("affine", lambda x: x * 3 + 1, False, "elementwise"),
    Op("scale", lambda x: x * 3, True, "elementwise"),
    Op("abs", np.abs, True, "elementwise"),
    Op("square", lambda x: x * x, True, "elementwise"),
    Op("neg", np.negative, True, "elementwise"),
    Op("relu", lambda x: np.maximum(x, 0), True, "elementwise"),
    Op("sin", np.sin, True, "elementwise"),
    Op("clip", lambda x: np.clip(x, -2, 2), True, "elementwise"),
    Op("flip", _rowwise(lambda x: x[:, ::-1]), True, "row"),
    Op("cumsum_row", _rowwise(lambda x: np.cumsum(x, axis=1)), True, "row"),
    Op("center_row", _rowwise(lambda x: x - x.sum(axis=1, keepdims=True)), True, "row"),
    Op("sort_row", _rowwise(lambda x: np.sort(x, axis=-1)), True, "row"),
    Op("identity", lambda x: x, True, "row"),
    Op("break_square", cg.graph_break(lambda x: x * x), True, "elementwise"),
    Op("cumsum_batch", lambda x: np.cumsum(x, axis=0), False, "causal"),  # padding rows get the sums
    Op("plus_colsum", lambda x: x + x.sum(axis=0, keepdims=True), False, "sum"),
]
OPS_BY_NAME = {op.name: op for op in OPS}
TRAILING = [(), (3,), (2, 4), (5,), (1,), (3, 3)]
DTYPES = [np.float32, np.float64, np.int32]


@st.composite
def pipelines(draw) -> tuple[list[str], bool]:
    """Op names, and whether the pipeline sums over the batch (then pad_value must be 0)."""
    names = draw(st.lists(st.sampled_from([op.name for op in OPS if op.kind != "sum"]), min_size=1, max_size=5))
    if not draw(st.booleans()):
        return names, False
    # One sum over the batch, after a zero-preserving prefix: the padding rows it adds are zeros.
    prefix = 0
    while prefix < len(names) and OPS_BY_NAME[names[prefix]].zero_preserving:
        prefix += 1
    at = draw(st.integers(0, prefix))
    return [*names[:at], "plus_colsum", *names[at:]], True


@st.composite
def configs(draw, sums: bool) -> dict[str, Any]:
    sizes = sorted(draw(st.sets(st.integers(1, 16), min_size=1, max_size=5)))
    return dict(
        backend="host",
        mode=draw(st.sampled_from(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "NONE", "FULL_DECODE_ONLY"])),
        capture_sizes=sizes,
        max_cached_graphs=draw(st.one_of(st.none(), st.integers(1, 4))),
        memory_budget=draw(st.one_of(st.none(), st.integers(64, 4096))),
        eviction=draw(st.sampled_from(["lru", "lfu"])),
        min_replays_to_keep=draw(st.integers(0, 2)),
        output_mode=draw(st.sampled_from(["copy", "view"])),
        capture_after=draw(st.integers(1, 3)),
        num_warmups=draw(st.integers(0, 2)),
        pad_value=0 if sums else draw(st.sampled_from([0, 1, -3, 2.5])),
        debug=draw(st.booleans()),
    )


@dataclasses.dataclass(frozen=True)
class Call:
    rows: int
    dtype: Any
    trailing: tuple
    scale: int  # a static argument: part of the key
    weight: str  # "same", "inplace" (new values, same array), "replace" (a new array) or "transpose"
    seed: int


@st.composite
def call_sequences(draw, pad_value: float = 0) -> list[Call]:
    """Calls over a small palette of (dtype, trailing shape), so keys repeat and graphs replay.

    A pad_value that is not a whole number fits float inputs only (an int input is an error)."""
    dtypes = DTYPES if float(pad_value).is_integer() else [d for d in DTYPES if np.dtype(d).kind == "f"]
    palette = draw(st.lists(st.tuples(st.sampled_from(dtypes), st.sampled_from(TRAILING)), min_size=1, max_size=3))
    return draw(st.lists(
        st.builds(
            lambda rows, kind, scale, weight, seed: Call(rows, *kind, scale, weight, seed),
            rows=st.integers(0, 19),
            kind=st.sampled_from(palette),
            scale=st.sampled_from([1, 2]),
            weight=st.sampled_from(["same", "same", "inplace", "replace", "transpose"]),
            seed=st.integers(0, 2**16),
        ),
        min_size=3,
        max_size=25,
    ))


def make_pipeline(names: list[str], mutate: Optional[str] = None) -> Callable[..., Any]:
    ops = [OPS_BY_NAME[n].fn for n in names]

    def pipeline(x, w, bias, scale):
        if mutate == "x":  # writes into a batched argument: the caller must see it, as eagerly
            x *= 2  # zero-preserving: a later sum over the batch must still see zero padding rows
        elif mutate == "bias":  # into an unbatched (copied) argument
            bias *= 2
        y = x * scale  # zero-preserving, so a later sum over the batch sees zero padding rows
        for op in ops:
            y = op(y)
        # w: a constant (captured by address); bias: an unbatched array (copied whole).
        return y + w, (y[..., :1] + bias[..., :1] if y.ndim > 1 else y + bias)

    return pipeline


def sample(rng: np.random.Generator, shape: tuple, dtype: Any) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def same(got: Any, want: Any, exact: bool) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if exact or got.dtype.kind in "iu":
        return np.array_equal(got, want)
    # float32 sums of 20 rows of O(10) values: compare at that precision, NaN/inf included.
    return np.allclose(got, want, rtol=1e-4 if got.dtype == np.float32 else 1e-10, atol=1e-4, equal_nan=True)


def run_sequence(names: list[str], sums: bool, config: dict, calls: list[Call],
                 mutate: Optional[str] = None) -> int:
    pipeline = make_pipeline(names, mutate)
    f = cg.jit(pipeline, config=config, constant_argnums=(1,), static_argnums=(3,))
    weights: dict[tuple, np.ndarray] = {}
    kept: list[tuple[Any, Any]] = []  # copy-mode results, checked again at the end
    n = 0
    with np.errstate(all="ignore"):
        for call in calls:
            rng = np.random.default_rng(call.seed)
            key = (np.dtype(call.dtype).str, call.trailing)
            w = weights.get(key)
            if w is None or call.weight == "replace":
                w = weights[key] = sample(rng, call.trailing, call.dtype)
            elif call.weight == "inplace":
                w[...] = sample(rng, call.trailing, call.dtype)
            elif call.weight == "transpose" and w.ndim == 2 and w.shape[0] == w.shape[1]:
                # Same address, shape and dtype when square: only the strides differ.
                w = weights[key] = w.T
            x = sample(rng, (call.rows, *call.trailing), call.dtype)
            bias = sample(rng, call.trailing, call.dtype)  # 0-d for 1-D batches
            x_eager, bias_eager = x.copy(), bias.copy()
            want = pipeline(x_eager, w.copy(), bias_eager, call.scale)
            if config["output_mode"] == "copy":  # (view results of earlier calls are the outputs)
                poison_outputs(f)  # a replay that does not rewrite its outputs returns the poison
            got = f(x, w, bias, call.scale)
            n += 1
            where = f"call {n}: {call} pipeline={names} mutate={mutate} config={config}"
            # Side effects on the arguments are the eager ones (none, or the function's own writes).
            assert np.array_equal(x, x_eager) and np.array_equal(bias, bias_eager), where
            for g, wnt in zip(got, want):
                assert same(g, wnt, exact=not sums), where
            if config["output_mode"] == "copy":
                kept.append((got, want))
            check_stats(f, n)
            limit = config["max_cached_graphs"]
            assert limit is None or f.registry.num_graphs() <= limit, where
            budget = config["memory_budget"]
            assert budget is None or f.registry.total_bytes() <= budget, where
    for got, want in kept:
        for g, wnt in zip(got, want):
            assert same(g, wnt, exact=not sums), "a copy-mode result changed after later calls"
    stats = f.stats()
    assert stats.replays == stats.hits  # a call that captures returns its own eager run's result
    return n


_TOTALS = {"examples": 0, "calls": 0}


def _fuzz_settings(soak: bool) -> settings:
    return settings(
        max_examples=2000 if soak else 250,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=not soak,  # CI sees the same examples every run; --soak explores
    )


def test_random_pipelines_configs_and_calls_equal_eager(soak):
    @_fuzz_settings(soak)
    @given(data=st.data())
    def check(data):
        names, sums = data.draw(pipelines(), label="pipeline")
        config = data.draw(configs(sums), label="config")
        calls = data.draw(call_sequences(config["pad_value"]), label="calls")
        mutate = data.draw(st.sampled_from([None] * 8 + ["x", "bias"]), label="mutate")
        _TOTALS["calls"] += run_sequence(names, sums, config, calls, mutate)
        _TOTALS["examples"] += 1

    check()
    record("fuzz", "host pipelines x configs x call sequences", cases=_TOTALS["calls"],
           examples=_TOTALS["examples"])


@pytest.mark.parametrize("names, sums", [
    (["identity"], False),
    (["flip", "identity"], False),
    (["square", "plus_colsum", "cumsum_batch"], True),
    (["cumsum_batch", "affine", "cumsum_batch"], False),
    (["break_square", "sort_row"], False),
])
@pytest.mark.parametrize("output_mode", ["copy", "view"])
def test_fixed_pipelines_under_eviction_pressure(names, sums, output_mode):
    """Deterministic companions of the fuzzer: small caches, every size, both output modes."""
    config = dict(backend="host", capture_sizes=[1, 2, 4, 8], max_cached_graphs=2, memory_budget=2048,
                  output_mode=output_mode, pad_value=0 if sums else -3)
    calls = [Call(rows, dt, tr, 1 + i % 2, ("same", "inplace", "replace", "transpose")[i % 4], i)
             for i, (rows, dt, tr) in enumerate(
                 (r, d, t) for r in (1, 3, 8, 5, 0, 9, 2, 7) for d in DTYPES for t in TRAILING[:3])]
    assert run_sequence(names, sums, config, calls) == len(calls)
