"""A differential fuzzer for zero-copy replay: random pipelines of elementwise ops, RawKernels,
reductions, in-place writes into arguments and outputs that alias inputs, called with random
batch sizes and argument layouts (fresh, aligned and unaligned slices, strided views, the same
array twice), compared bit for bit with eager execution on copies of the same arguments; and the same
pipelines called on 2 to 8 argument sets the caller keeps, in turn or in random order (issue 30).
tests/gpu/test_zero_copy_cycles.py does the same per kind of plan, with the statistics."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers  # noqa: E402

from cupygraph.kernels import get_kernel  # noqa: E402
from cupygraph.pytree import flatten  # noqa: E402

COLS = 64
PIPELINES = 40
CALLS_PER_PIPELINE = 52  # 2,080 cases
OPS = ("scale", "add_arg", "tanh", "affine", "inplace_arg", "reverse", "row_sum")


def make_pipeline(rng: np.random.Generator, nargs: int):
    affine = get_kernel("elementwise.cu", "affine")
    ops = [(OPS[rng.integers(len(OPS))], int(rng.integers(nargs)), np.float32(rng.uniform(0.5, 1.5)))
           for _ in range(int(rng.integers(1, 6)))]
    ending = int(rng.integers(3))

    def pipeline(*args):
        v = args[0] * 1
        for op, j, c in ops:
            if op == "scale":
                v = v * c
            elif op == "add_arg":
                v = v + args[j]
            elif op == "tanh":
                v = cupy.tanh(v)
            elif op == "affine":
                out = cupy.empty_like(v)
                n = v.size
                affine((min(1024, (n + 255) // 256),), (256,), (v, out, np.int64(n), c, np.float32(0.5)))
                v = out
            elif op == "inplace_arg":
                args[j][...] += v * c
            elif op == "reverse":
                v = v[:, ::-1] * c
            else:
                v = v + v.sum(axis=1, keepdims=True) * np.float32(0.01)
        if ending == 0:
            return v
        if ending == 1:
            return v, args[0]
        return v[:, : COLS // 2], v[:, COLS // 2:]

    return pipeline


def arguments(rng: np.random.Generator, rows: int, nargs: int) -> list:
    made = []
    for _ in range(nargs):
        form = int(rng.integers(5))
        data = rng.standard_normal((rows + 8, 2 * COLS)).astype(np.float32)
        big = cupy.asarray(data)
        if form == 0:
            made.append(cupy.asarray(data[:rows, :COLS]))
        elif form == 1:  # a contiguous, aligned row slice of a larger array
            made.append(big.reshape(-1, COLS)[2:2 + rows])
        elif form == 2:  # contiguous, unaligned
            made.append(big.reshape(-1)[1:1 + rows * COLS].reshape(rows, COLS))
        elif form == 3:  # strided
            made.append(big[:rows, ::2])
        else:
            made.append(made[-1] if made else cupy.asarray(data[:rows, :COLS]))  # the same array twice
    return made


def copies_keeping_aliases(args: list) -> list:
    seen: dict[int, object] = {}
    return [seen.setdefault(id(a), a.copy()) for a in args]


def poison(graphed) -> None:
    poison_static_buffers(graphed, cupy)


def call_and_compare(graphed, fn, args: list) -> None:
    """``graphed(*args)`` with its static buffers poisoned, against ``fn`` on copies of ``args``: every
    output and every argument afterwards bit for bit."""
    expected_args = copies_keeping_aliases(args)
    want = fn(*expected_args)
    poison(graphed)
    got = graphed(*args)
    got_leaves = flatten(got, lambda v: isinstance(v, cupy.ndarray))[0]
    want_leaves = flatten(want, lambda v: isinstance(v, cupy.ndarray))[0]
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves + args, want_leaves + expected_args):
        np.testing.assert_array_equal(cupy.asnumpy(g), cupy.asnumpy(w))


def test_random_pipelines_equal_eager():
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(20261126)
    rebinds = 0
    for _ in range(PIPELINES):
        nargs = int(rng.integers(1, 4))
        fn = make_pipeline(rng, nargs)
        graphed = cg.jit(fn, config=dict(backend="cupy", input_binding="auto", capture_sizes=[4, 8, 16]),
                         batch_argnums=tuple(range(nargs)))
        for _ in range(CALLS_PER_PIPELINE):
            rows = int(rng.choice([4, 8, 16, int(rng.integers(1, 17))]))
            call_and_compare(graphed, fn, arguments(rng, rows, nargs))
        rebinds += sum(graphed.stats().rebinds_by_argument.values())
    assert rebinds > 0  # the fuzzer exercised binding, not only copies


CYCLING_PIPELINES = 16
CYCLING_CALLS = 24


def refill(rng: np.random.Generator, args: list) -> None:
    """Fresh data into the caller's arrays where they are (the same array twice is filled twice)."""
    for a in args:
        a[...] = cupy.asarray(rng.standard_normal(a.shape).astype(np.float32))


def test_random_pipelines_cycling_among_buffers_equal_eager():
    """Issue 30's address patterns: each pipeline called on 2 to 8 argument sets kept by the caller (a
    prefetch ring; each set in the forms above), taken in turn or in random order, refilled before
    each call."""
    cupy.cuda.Device(0).use()
    rng = np.random.default_rng(20261130)
    made = 0
    for p in range(CYCLING_PIPELINES):
        nargs = int(rng.integers(1, 4))
        fn = make_pipeline(rng, nargs)
        graphed = cg.jit(fn, config=dict(backend="cupy", input_binding="auto", capture_sizes=[8],
                                         executables_per_graph=8), batch_argnums=tuple(range(nargs)))
        count = int(rng.integers(2, 9))
        sets = [arguments(rng, 8, nargs) for _ in range(count)]
        cyclic = p % 2 == 0
        for i in range(CYCLING_CALLS):
            args = sets[i % count if cyclic else int(rng.integers(count))]
            refill(rng, args)
            call_and_compare(graphed, fn, args)
        made += graphed.stats().executables_made
    assert made > 0  # the callers' addresses were held by executables made for them, not only re-pointed
