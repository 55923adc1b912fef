"""A function that writes into its arguments changes the caller's arrays once per call, as eagerly,
also when its capture ran no warm-up.

A CUDA stream capture executes nothing, so under ``num_warmups=0`` no run on the static copies can
show that a function writes into its copied arguments: the call that captures runs the function as
it is and shows it, and where that run changed no byte, the first replay checks. The host backend
undoes what its capture run wrote, so a first call does not change the caller's arrays twice
where the GPU changes them once.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST0 = dict(backend="host", capture_sizes=[4, 8], num_warmups=0)


class RecordOnlyBackend(cg.HostBackend):
    """The host backend with a capture that leaves the arrays it was given as they were, as a CUDA
    stream capture does (warm-ups aside: use it with num_warmups=0)."""

    def capture(self, fn, args, kwargs, **options):
        saved = [(a, a.copy()) for a in args if isinstance(a, np.ndarray)]
        recording = super().capture(fn, args, kwargs, **options)
        for array, before in saved:
            np.copyto(array, before)
        return recording


def graphed(fn, backend_kind, **options):
    if backend_kind == "host":
        return cg.jit(fn, config=HOST0, **options)
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(**HOST0), backend=RecordOnlyBackend())
    return cg.GraphedFunction(fn, registry=registry, **options)


def scale_and_shift(x, bias):
    x *= 2  # a batched argument
    bias += 1  # an unbatched one, copied whole
    return x + bias


@pytest.mark.parametrize("backend_kind", ["host", "record_only"])
def test_writes_into_arguments_reach_the_caller_without_warmups(backend_kind):
    rng = np.random.default_rng(11)
    f = graphed(scale_and_shift, backend_kind)
    for rows in (3, 3, 5, 8, 2):  # first calls of two sizes, then replays of each
        x, bias = rng.standard_normal((rows, 4)), rng.standard_normal(4)
        xe, be = x.copy(), bias.copy()
        want = scale_and_shift(xe, be)
        got = f(x, bias)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, xe)  # changed once, as eagerly
        np.testing.assert_array_equal(bias, be)
    assert f.registry.num_graphs() == 2
    assert all(entry.written == (0, 1) for entry in f.registry.entries())


@pytest.mark.parametrize("backend_kind", ["host", "record_only"])
def test_a_function_that_writes_nothing_keeps_the_plain_replay(backend_kind):
    rng = np.random.default_rng(12)
    f = graphed(lambda x, bias: x * 2 + bias, backend_kind)
    x, bias = rng.standard_normal((3, 4)), rng.standard_normal(4)
    xe, be = x.copy(), bias.copy()
    for _ in range(3):
        np.testing.assert_array_equal(f(x, bias), xe * 2 + be)
    np.testing.assert_array_equal(x, xe)
    np.testing.assert_array_equal(bias, be)
    (entry,) = f.registry.entries()
    # After the first replay: the plain strategy, copied or zero-copy; no check, no write-back.
    assert entry.written == () and entry.strategy in ("copied", "bound", "bound_plain")


def test_the_first_call_changes_an_array_the_function_reaches_once():
    hits = np.zeros(1)

    def counts(x):
        hits[...] += 1  # an array reached through the closure, written by address
        return x + 1

    f = cg.jit(counts, config=HOST0)
    x = np.arange(12.0).reshape(3, 4)
    with pytest.warns(cg.ForeignMemoryWarning, match="hits"):
        np.testing.assert_array_equal(f(x), x + 1)
    assert hits[0] == 1  # the replay's write only: a CUDA stream capture executes nothing
    f(x)
    assert hits[0] == 2


def test_the_wrapper_runs_an_in_place_runnable_once_on_its_first_call():
    def add_one(x):
        x += 1
        return x * 2

    wrapper = cg.CUDAGraphWrapper(add_one, cg.CUDAGraphMode.FULL, config=dict(backend="host", capture_sizes=[4]))
    x = np.arange(8.0).reshape(4, 2)
    start = x.copy()
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(4)):
        out = wrapper(x)  # captured on these very arrays, then replayed
        np.testing.assert_array_equal(x, start + 1)
        np.testing.assert_array_equal(out, (start + 1) * 2)
        wrapper(x)
    np.testing.assert_array_equal(x, start + 2)
    assert wrapper.registry.num_graphs() == 1


def test_a_failed_capture_leaves_the_arguments_as_they_were():
    def bad(x):
        x += 1
        return x[x > 0]  # a data-dependent shape: refused at capture

    wrapper = cg.CUDAGraphWrapper(bad, cg.CUDAGraphMode.FULL, config=dict(backend="host", capture_sizes=[4]))
    x = np.arange(8.0).reshape(4, 2)
    start = x.copy()
    with cg.cudagraph_context(cg.CUDAGraphMode.FULL, cg.BatchDescriptor(4)):
        wrapper(x)  # the capture fails; the call runs eagerly, once
    np.testing.assert_array_equal(x, start + 1)


def test_overlapping_arguments_on_the_first_replay_run_eagerly_and_the_check_stays():
    def f(a, b):
        np.maximum(a, 0.0, out=a)  # a write that leaves non-negative data as it was
        return a * b

    g = cg.jit(f, config=HOST0)
    data = np.arange(16.0).reshape(4, 4)  # a capture size: nothing padded
    # The call that captures runs f as it is: its write changed no byte, so the first replay checks.
    np.testing.assert_array_equal(g(data, data.copy()), data * data)
    x = -np.arange(16.0).reshape(4, 4)
    want_x = x.copy()
    want = f(want_x, want_x)
    np.testing.assert_array_equal(g(x, x), want)  # overlapping on the check: eager, as written
    np.testing.assert_array_equal(x, want_x)
    assert g.stats().fallbacks_by_reason == {"aliased_write": 1}
    a, b = -np.ones((4, 4)), np.full((4, 4), 2.0)
    want_a = a.copy()
    want = f(want_a, b.copy())
    np.testing.assert_array_equal(g(a, b), want)  # separate arrays: the check runs and writes back
    np.testing.assert_array_equal(a, want_a)
