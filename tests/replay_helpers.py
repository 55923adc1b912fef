"""Make "the replay equals eager" checks able to fail on the host backend.

A host replay re-executes the function, so a replay that forgot to write its outputs would still
look right when it is compared on the data it was captured with. Poisoning the static outputs
before a replay, and replaying on new data, catches a replay that returns stale values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from cupygraph.pytree import flatten, unflatten


def _garbage(dtype: np.dtype) -> Any:
    if dtype.kind in "fc":
        return np.nan
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return True


def poison_outputs(graphed: Any, xp: Any = np) -> int:
    """Overwrite every static output of ``graphed``'s graphs with garbage (``xp``: numpy or cupy); return
    how many. A replay that fails to write an element then shows it.

    Outputs that share memory with the graph's static inputs (a function returning its argument)
    are left alone: the next call rewrites only the real rows of those.
    """
    count = 0
    for entry in graphed.registry.entries():
        inputs = list(entry.static_inputs) + list(entry.whole_inputs)
        leaves, _ = flatten(entry.recording.outputs, lambda v: isinstance(v, xp.ndarray))
        for leaf in leaves:
            if (not isinstance(leaf, xp.ndarray) or not leaf.size or not getattr(leaf.flags, "writeable", True)
                    or any(xp.shares_memory(leaf, buf) for buf in inputs)):
                continue
            leaf[...] = _garbage(leaf.dtype)
            count += 1
    return count


def assert_same_array(got: Any, want: Any) -> None:
    """The same shape, dtype and bits (NaN equal to NaN), for NumPy or CuPy arrays."""
    got, want = (np.asarray(a.get() if hasattr(a, "get") else a) for a in (got, want))
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_array_equal(got, want)


def same(got: Any, want: Any) -> bool:
    """Equal structure and bit-equal arrays (NaN equal to NaN)."""
    got_leaves, got_spec = flatten(got, lambda v: isinstance(v, np.ndarray))
    want_leaves, want_spec = flatten(want, lambda v: isinstance(v, np.ndarray))
    if got_spec != want_spec or len(got_leaves) != len(want_leaves):
        return False
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, np.ndarray):
            g = np.asarray(g)
            if g.shape != w.shape or g.dtype != w.dtype:
                return False
            if not np.array_equal(g, w, equal_nan=w.dtype.kind in "fc"):
                return False
        elif g != w:
            return False
    return True


def check_replay_follows_new_data(graphed: Any, fn: Any, before: tuple, after: tuple) -> None:
    """Call on ``before`` (captures), poison the outputs, call on ``after`` (replays): the replay
    equals ``fn(*after)`` and differs from the first result."""
    first = graphed(*before)
    replays = graphed.stats().replays
    assert poison_outputs(graphed) > 0, "nothing to poison: the check could not fail"
    got = graphed(*after)
    assert graphed.stats().replays == replays + 1, "the second call did not replay"
    assert same(got, fn(*after)), "the replay differs from eager on the new data"
    assert not same(got, first), "the new data gave the first call's result: the check could not fail"


def randn32(xp: Any, rng: np.random.Generator, *shape: int) -> Any:
    """Fresh standard-normal float32 data of ``shape`` from ``rng``, as an array of ``xp`` (numpy or cupy)."""
    return xp.asarray(rng.standard_normal(shape).astype(np.float32))


def poison_static_buffers(graphed: Any, xp: Any) -> None:
    """NaN into every floating static input and output of ``graphed``'s graphs (``xp``: numpy or
    cupy); the padding rows are rewritten on the next call. A zero-copy node left pointing at a
    static buffer then shows as NaN."""
    for entry in graphed.registry.entries():
        leaves, _ = flatten(entry.recording.outputs, lambda v: isinstance(v, xp.ndarray))
        for buf in [*entry.static_inputs, *entry.whole_inputs, *leaves]:
            if isinstance(buf, xp.ndarray) and buf.dtype.kind == "f":
                buf.fill(np.nan)
        entry.arena.state = None


def run_threads(target: Callable[[int], None], count: int, timeout_s: float = 120.0) -> list[BaseException]:
    """Run ``target(t)`` on ``count`` threads started together (a barrier); return what they raised.
    A thread still running after ``timeout_s`` fails the test as a deadlock (a hang guard, not a
    timing check)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def wrapped(t: int) -> None:
        try:
            barrier.wait(timeout=30)
            target(t)
        except BaseException as err:  # reported by the caller
            errors.append(err)

    threads = [threading.Thread(target=wrapped, args=(t,), daemon=True) for t in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"deadlock: {alive} still running after {timeout_s} s"
    return errors


def replayed(graphed: Any, *args: Any) -> tuple[Any, bool]:
    """(``graphed(*args)``, whether it replayed a graph). The call that captures a key, and a key's first
    padded call, run the function as it is at the real rows, where a GEMM rounds as at that row count:
    such a call equals the plain function, a replay equals it on the padded batch."""
    hits = graphed.stats().hits
    got = graphed(*args)
    return got, graphed.stats().hits > hits


def eager_at_padded_size(graphed: Any, *args: Any) -> Any:
    """``graphed``'s function run eagerly on ``args`` with its batched arrays padded as the graph pads
    them (to the capture size the config gives the batch, with ``pad_value`` or, under
    ``pad_mode="edge"``, the last real row) and outputs whose leading axis is that size cut back: what
    a replay equals bit for bit (RELIABILITY.md, promise 1), whatever the BLAS and its thread count."""
    from cupygraph.dispatch.decision import decide_batch_size

    config, batch = graphed.config, graphed.batch_argnums
    rows = args[batch[0]].shape[0]
    size = decide_batch_size(config, rows).padded.num_tokens
    padded = list(args)
    for i in batch:
        a = args[i]
        filler = np.repeat(a[-1:], size - rows, axis=0) if config.pad_mode == "edge" else np.full(
            (size - rows, *a.shape[1:]), config.pad_value, dtype=a.dtype)
        padded[i] = np.concatenate([a, filler.astype(a.dtype)])
    leaves, spec = flatten(graphed.__wrapped__(*padded), lambda v: isinstance(v, np.ndarray))
    return unflatten(spec, [leaf[:rows] if isinstance(leaf, np.ndarray) and leaf.ndim and leaf.shape[0] == size
                            else leaf for leaf in leaves])


class AsItIs:
    """Which calls of a jitted function run the function as it is, at their real rows (cache/first_call.py):
    the first call of a key, and the first padded call of a key whose first call was not padded. Every
    other call replays the graph: the padded eager call bit for bit (``eager_at_padded_size``)."""

    def __init__(self, graphed: Any):
        self.graphed = graphed
        self.keys: dict[int, bool] = {}
        """Padded size -> whether a padded call of it ran as it is (its outputs checked)."""

    def __call__(self, *args: Any) -> bool:
        """Whether the next call with ``args`` runs the function as it is (call it before the call)."""
        from cupygraph.dispatch.decision import decide_batch_size

        rows = args[self.graphed.batch_argnums[0]].shape[0]
        size = decide_batch_size(self.graphed.config, rows).padded.num_tokens
        if size not in self.keys:
            self.keys[size] = rows < size
            return True
        if rows < size and not self.keys[size]:
            self.keys[size] = True
            return True
        return False


def gemm_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How far apart two computations of ``a @ b`` may be, per element, whatever their order of summation
    (a BLAS or cuBLAS kernel, blocking and thread split chosen by the row count): 2 γ_k (|a| @ |b|), with
    γ_k = k u / (1 - k u), k the inner dimension and u the unit roundoff of the result's dtype (each is
    within γ_k (|a| @ |b|) of the exact product: Higham, Accuracy and Stability, 3.5)."""
    u = np.finfo(np.result_type(a.dtype, b.dtype)).eps / 2
    k = a.shape[-1]
    gamma = k * u / (1 - k * u)
    return 2 * gamma * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
