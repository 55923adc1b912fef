"""The compiled replay's record beyond one array in, one ringed array out: constants, static values,
unbatched arrays, several outputs, fresh outputs (over 64 MiB) and outputs returned as they are
(``output_mode="view"``). Plain Python objects stand for CuPy arrays, as in ``test_compiled_replay.py``;
``tests/gpu/test_fast_replay.py`` drives the same on real arrays. Which banks a record may launch (the
constants' addresses, arguments written into) ``record_of`` decides: ``test_compiled_record_of.py``."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest

try:
    from cupygraph.backends.fastpath import _replay
except ImportError:  # pragma: no cover - no C compiler where the package was installed
    _replay = None

pytestmark = pytest.mark.skipif(_replay is None, reason="the compiled replay is not built here")

STREAM = 7
DTYPE = object()
X, Y, OUT, OUT2, BIG = 0x1000, 0x2000, 0x4000, 0x5000, 0x10000


class _Memory:
    pass


class _Pointer:
    def __init__(self, ptr):
        self.ptr, self.mem, self.device_id = ptr, _Memory(), 0


class Array:
    def __init__(self, ptr, shape=(4,), dtype=DTYPE, strides=(8,)):
        self.data, self.shape, self.dtype, self.strides = _Pointer(ptr), shape, dtype, strides


def _ring(item):
    """``item`` = [array, stream, None] with its counts taken now: a test holds the array as a call will
    (by one local name), so it is free again at the next call."""
    item[2] = _replay.references(item)
    return item


def _record(arguments, nslots_addresses, outputs, *, arrays=1, structure=None, allocate=Array):
    """A record with one bank holding ``nslots_addresses``; returns it and its log of launches."""
    log: list[str] = []
    counts, family = _replay.ReplayCounts(), _replay.FamilyState()
    record = _replay.Record(
        array_type=Array, arguments=arguments, shapes=((4,),) * arrays, strides=((8,),) * arrays,
        dtypes=(DTYPE,) * arrays, outputs=outputs, structure=structure, allocate=allocate, device=-1, stream=STREAM,
        banks=((0, 0, tuple(nslots_addresses), lambda: log.append("launched")),), rows=4, counts=counts,
        family=family, generation=family.generation, lock=threading.Lock(),
        current_stream=lambda: SimpleNamespace(ptr=STREAM), graph_launch=0)
    return record, log


def test_a_constant_is_matched_by_identity():
    weights, out = object(), Array(OUT)
    ring = _ring([out, STREAM, None])
    record, log = _record((0, ("same", weights)), (X, OUT), (("ring", 1, (ring,)),))
    assert record.replay((Array(X), weights)) is out and log == ["launched"]
    assert record.replay((Array(X), object())) is None  # another constant set: the Python path rebinds
    assert log == ["launched"] and record.passed == 1


@pytest.mark.parametrize(("given", "served"), [(3, True), (4, False), (3.0, False), (True, False)])
def test_a_static_value_must_have_the_keys_type_and_value(given, served):
    out = Array(OUT)
    record, log = _record((("equal", int, 3), 0), (X, OUT), (("ring", 1, (_ring([out, STREAM, None]),)),))
    result = record.replay((given, Array(X)))
    assert (result is out) is served and log == (["launched"] if served else [])


@pytest.mark.parametrize(("made_for", "given", "served"), [
    ((2,), (2,), True), ((2,), (2.0,), False), ((2,), (True,), False), ((1, (2,)), (1, (2.0,)), False),
    ((1, (2,)), (1, (2,)), True), ((2, 3), (2,), False), (0.0, 0.0, True), (0.0, -0.0, False),
    (-0.0, -0.0, True), (float("nan"), float("nan"), True), (1.0, float("nan"), False),
    (complex(1, 0.0), complex(1, -0.0), False), (complex(1, 0.0), complex(1, 0.0), True),
    ((0.0,), (-0.0,), False), ("a", "a", True)])
def test_a_static_value_is_compared_as_the_python_paths_key_tells_it_apart(made_for, given, served):
    """(2,) == (2.0,) and 0.0 == -0.0, yet ``x * k[0]`` and ``1 / k`` trace otherwise: the record compares item
    types and zero signs (and a NaN equals a NaN, as ``keyable`` keys it)."""
    out = Array(OUT)
    record, log = _record((("equal", type(made_for), made_for), 0), (X, OUT),
                          (("ring", 1, (_ring([out, STREAM, None]),)),))
    result = record.replay((given, Array(X)))
    assert (result is out) is served and log == (["launched"] if served else [])


def test_a_static_value_whose_comparison_raises_is_handed_back_without_an_error():
    class Odd:
        def __eq__(self, other):
            raise ValueError("no comparison")

        __hash__ = object.__hash__

    ring = _ring([Array(OUT), STREAM, None])
    record, log = _record((("equal", Odd, Odd()), 0), (X, OUT), (("ring", 1, (ring,)),))
    assert record.replay((Odd(), Array(X))) is None and log == []


def test_unbatched_arrays_take_their_slots_in_the_order_given():
    out = Array(OUT)
    # position 0 is the unbatched array (slot 1), position 1 the batched one (slot 0)
    record, log = _record((1, 0), (X, Y, OUT), (("ring", 2, (_ring([out, STREAM, None]),)),), arrays=2)
    assert record.replay((Array(Y), Array(X))) is out
    assert record.replay((Array(X), Array(Y))) is None and log == ["launched"]


def test_two_outputs_make_a_tuple_and_a_held_one_hands_the_call_back_with_nothing_kept():
    first, second = Array(OUT), Array(OUT2)
    ring1, ring2 = _ring([first, STREAM, None]), _ring([second, STREAM, None])
    record, log = _record((0,), (X, OUT, OUT2), (("ring", 1, (ring1,)), ("ring", 2, (ring2,))), structure=tuple)
    result = record.replay((Array(X),))
    assert result == (first, second) and log == ["launched"]
    del result
    held = second  # the caller keeps the second output
    before = sys.getrefcount(first)
    assert record.replay((Array(X),)) is None  # the second output is still held: the Python path's
    after = sys.getrefcount(first)
    assert after == before and log == ["launched"]
    del held
    assert record.replay((Array(X),)) == (first, second) and record.served == 2


def test_a_list_or_any_other_structure_is_rebuilt_from_the_leaves():
    out, kept = Array(OUT), object()
    ring = _ring([out, STREAM, None])
    as_list, _ = _record((0,), (X, OUT), (("ring", 1, (ring,)), ("as_is", kept)), structure=list)
    assert as_list.replay((Array(X),)) == [out, kept]
    built, _ = _record((0,), (X, OUT), (("ring", 1, (_ring([Array(OUT), STREAM, None]),)), ("as_is", kept)),
                       structure=lambda leaves: {"y": leaves[0], "z": leaves[1]})
    assert built.replay((Array(X),))["z"] is kept


def test_a_fresh_output_is_allocated_and_served_where_a_bank_holds_its_address():
    made: list = []

    def allocate(shape, dtype):
        array = Array(BIG if not made else BIG + 4096, shape, dtype)
        made.append(array)
        return array

    record, log = _record((0,), (X, BIG), (("fresh", 1, (1 << 20,), DTYPE),), allocate=allocate)
    result = record.replay((Array(X),))
    assert result is made[0] and result.shape == (1 << 20,) and log == ["launched"]
    assert record.replay((Array(X),)) is None and len(made) == 2  # another address: re-pointed in Python
    count = sys.getrefcount(made[1])
    assert count == 2  # (the list and the call): the record kept nothing


def test_an_allocation_that_fails_raises_and_releases_the_lock():
    def allocate(shape, dtype):
        raise MemoryError("out of memory")

    record, log = _record((0,), (X, BIG), (("fresh", 1, (4,), DTYPE),), allocate=allocate)
    with pytest.raises(MemoryError):
        record.replay((Array(X),))
    assert log == [] and record.counts.replays == 0


def test_view_mode_returns_the_static_output_itself_and_binds_only_arguments():
    static = Array(OUT)
    record, log = _record((0,), (X,), (("as_is", static),))
    assert record.replay((Array(X),)) is static and record.replay((Array(X),)) is static
    assert log == ["launched", "launched"] and record.counts.bound_calls == 2
