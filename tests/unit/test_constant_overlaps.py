"""A constant argument (read by address) that overlaps a copied argument, where the function writes into
either: a replay works on the static copy, so the write made through one would not show through the other
as it does eagerly. Such calls run eagerly (``aliased_write``), as overlapping written arguments do; read-only
overlaps replay."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST = {"backend": "host", "capture_sizes": [4, 8]}


def _writes_the_batch(x, w):
    x += 1
    return x * w


def _writes_the_constant(x, w):
    w += 1
    return x * 2


def _writes_the_unbatched(x, v, w):
    v += 1
    return x * w


def _reads_both(x, w):
    return x * w


CASES = {
    # (function, arguments from one array, constant positions)
    "writes the batch a constant views": (_writes_the_batch, lambda b: (b[1:], b[1]), (1,)),
    "writes a constant that views the batch": (_writes_the_constant, lambda b: (b[1:], b[1]), (1,)),
    "writes an unbatched argument a constant views": (_writes_the_unbatched, lambda b: (b[1:], b[0], b[0]), (2,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_writes_through_a_constant_overlapping_a_copied_argument_are_seen_as_eagerly(case):
    fn, arguments, constants = CASES[case]
    graphed = cg.jit(fn, config=HOST, constant_argnums=constants)
    rng = np.random.default_rng(0)
    for rows in [5, 3, 5, 3, 6, 2]:  # padded calls: the batch is copied into the static buffer
        mine = rng.standard_normal((rows + 1, 4)).astype(np.float32)
        theirs = mine.copy()
        got = graphed(*arguments(mine))
        want = fn(*arguments(theirs))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(mine, theirs)
    stats = graphed.stats()
    assert stats.fallbacks_by_reason["aliased_write"] > 0
    assert "constant argument" in stats.detail("aliased_write")


def test_a_constant_overlapping_an_argument_nothing_writes_replays():
    graphed = cg.jit(_reads_both, config=HOST, constant_argnums=(1,))
    rng = np.random.default_rng(1)
    for rows in [5, 3, 5, 3]:
        b = rng.standard_normal((rows + 1, 4)).astype(np.float32)
        np.testing.assert_array_equal(graphed(b[1:], b[1]), b[1:] * b[1])
    assert graphed.stats().hits > 0 and not graphed.stats().fallbacks_by_reason


def test_a_bound_call_whose_copied_argument_views_a_written_constant_runs_eagerly():
    """Under ``input_binding="auto"`` a call of exactly the captured rows is bound, but an argument that cannot
    be bound (here not contiguous) is still copied in: a write into a constant it overlaps would not show
    through the copy. The bound strategies check overlaps as the copying ones do (found by review-gpu: they
    checked only for written arguments, and returned ``x * 2`` of the old rows)."""
    config = {"backend": "host", "capture_sizes": [4], "input_binding": "auto"}
    graphed = cg.jit(_writes_the_constant, config=config, constant_argnums=(1,))
    rng = np.random.default_rng(2)
    apart = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    for _ in range(2):  # captured on separate arrays (the call that captures writes the constant), then replayed
        graphed(*apart)
    mine = np.empty((4, 8), np.float32)
    theirs = np.empty_like(mine)
    for call in range(4):
        mine[...] = rng.standard_normal(mine.shape)
        theirs[...] = mine
        got = graphed(mine[:, :4], mine[0, :4])  # the batch (copied: not contiguous) and a constant on its row 0
        want = _writes_the_constant(theirs[:, :4], theirs[0, :4])
        np.testing.assert_array_equal(got, want, err_msg=f"call {call}")
        np.testing.assert_array_equal(mine, theirs, err_msg=f"call {call}")
    assert graphed.stats().fallbacks_by_reason["aliased_write"] == 4


@pytest.mark.parametrize("binding", ["copy", "auto"])
def test_a_new_view_of_the_same_memory_at_every_call_is_still_seen_to_overlap(binding):
    """Callers pass a new view object at every call (``b[0]``): the entry knows its constants by their bytes, not
    by the view it was given once (the GPU run of 2026-11-27 14:17 UTC caught a weakly held view going away)."""
    g = cg.jit(_writes_the_constant, constant_argnums=(1,), config={**HOST, "input_binding": binding})
    rng = np.random.default_rng(3)
    for _ in range(3):  # captured, and replayed, on arrays apart
        g(rng.standard_normal((8, 4)), rng.standard_normal(4))
    mine = np.empty((8, 8))
    for call in range(6):
        mine[...] = rng.standard_normal((8, 8))
        theirs = mine.copy()
        want = _writes_the_constant(theirs[:, :4], theirs[0, :4])
        np.testing.assert_array_equal(g(mine[:, :4], mine[0, :4]), want, err_msg=f"call {call}")
        np.testing.assert_array_equal(mine, theirs, err_msg=f"call {call}")
    # Every replay runs eagerly (under "copy" the new constant's first call captures, as it is: 5 of 6).
    assert g.stats().fallbacks_by_reason["aliased_write"] == (6 if binding == "auto" else 5)
