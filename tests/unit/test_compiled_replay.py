"""The compiled replay (``cupygraph/backends/fastpath/_replay.c``) on the CPU: what it serves, what it hands back
untouched, and what it counts.

It reads one immutable ``Record`` per shortcut, and of the call's arrays only CuPy's public attributes
(``shape``, ``dtype``, ``strides``, ``data.ptr``, ``data.device_id``, ``data.mem``); here plain Python
objects carry those (the GPU test ``tests/gpu/test_fast_replay.py`` drives it on real CuPy arrays).
Each hand-back case changes one condition of a call that is otherwise served, and checks that
nothing moved.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import shutil
import sysconfig
import threading
import weakref
from types import SimpleNamespace

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.api.shortcuts import RETIRED, Shortcut, Shortcuts
from cupygraph.backends.fastpath.compiled import PythonFastFunction

try:
    from cupygraph.backends.fastpath import _replay
except ImportError:  # pragma: no cover - no C compiler where the package was installed
    _replay = None

COMPILER = shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")


def test_the_extension_is_built_wherever_a_compiler_is():
    if COMPILER is None:
        pytest.skip("no C compiler here: cupygraph replays through its Python path")
    assert importlib.util.find_spec("cupygraph.backends.fastpath._replay") is not None, (
        "a C compiler is installed but cupygraph/backends/fastpath/_replay.c was not built "
        "(pip install -e . builds it)")


needs_extension = pytest.mark.skipif(_replay is None, reason="the compiled replay is not built here")

IN, OUT, OTHER_OUT, STREAM = 0x1000, 0x2000, 0x3000, 7
DTYPE = object()  # compared by identity, as NumPy's dtypes are


class _Memory:
    pass


class _Pointer:
    def __init__(self, ptr, device_id=0):
        self.ptr, self.mem, self.device_id = ptr, _Memory(), device_id


STRIDES = (24, 8)


class Array:
    """What the replay reads of a CuPy array (its public attributes only)."""

    def __init__(self, ptr, shape=(4, 3), dtype=DTYPE, strides=STRIDES):
        self.data, self.shape, self.dtype, self.strides = _Pointer(ptr), shape, dtype, strides


def _world(graph_launch=0, inputs=(IN,), **overrides):
    """A record of one shortcut (two banks, a ring of one output) and the state it counts into;
    ``overrides`` replace the Record's keyword arguments (``w.kwargs``)."""
    w = SimpleNamespace(log=[], stream=SimpleNamespace(ptr=STREAM), lock=threading.Lock())
    w.counts = _replay.ReplayCounts()
    w.family = _replay.FamilyState()
    w.out = Array(OUT)
    w.item = [w.out, STREAM, None]
    w.item[2] = _replay.references(w.item)
    n = len(inputs)
    banks = ((0, 0xA0, (*inputs, OUT), lambda: w.log.append("bank0")),
             (1, 0, (*inputs, OTHER_OUT), lambda: w.log.append("bank1")))
    w.kwargs = dict(
        array_type=Array, arguments=tuple(range(n)), shapes=((4, 3),) * n, strides=(STRIDES,) * n,
        dtypes=(DTYPE,) * n, outputs=(("ring", n, (w.item,)),), structure=None, allocate=Array, device=-1,
        stream=STREAM, banks=banks, rows=4, counts=w.counts, family=w.family,
        generation=w.family.generation, lock=w.lock, current_stream=lambda: w.stream, graph_launch=graph_launch)
    w.kwargs.update(overrides)
    w.lock = w.kwargs["lock"]
    w.record = _replay.Record(**w.kwargs)
    return w


def _state(w):
    """Everything a call may change, as plain values."""
    c = w.counts
    return (list(w.log), c.replays, c.bound_calls, c.last_used, c.last_bank, dict(c.hits), w.family.generation)


@needs_extension
def test_a_steady_call_is_served_and_counted_as_the_python_path_counts_it():
    w = _world()
    out = w.record.replay((Array(IN),))
    assert out is w.out and w.log == ["bank0"]
    first_tick = w.counts.last_used
    assert (w.counts.replays, w.counts.bound_calls, w.counts.last_bank, w.counts.hits) == (1, 1, 0, {4: 1})
    assert not w.lock.locked()
    del out  # the caller lets go: the ring's array is taken again
    assert w.record.replay((Array(IN),)) is w.out
    assert (w.record.served, w.record.passed, w.counts.hits) == (2, 0, {4: 2})
    assert w.counts.last_used > first_tick  # the family-wide use clock, shared with Python's tick()
    assert _replay.tick() > w.counts.last_used


def _arg(**change):
    return lambda w: (Array(change.get("ptr", IN), change.get("shape", (4, 3)), change.get("dtype", DTYPE),
                            change.get("strides", STRIDES)),)


HAND_BACKS = {
    "another shape": lambda w: _arg(shape=(5, 3))(w),
    "another dtype": lambda w: _arg(dtype=object())(w),
    "not C-contiguous": lambda w: _arg(strides=(8, 32))(w),
    "an address no bank holds": lambda w: _arg(ptr=0x9000)(w),
    "two arguments": lambda w: (Array(IN), Array(IN)),
    "another array type": lambda w: (np.zeros((4, 3)),),
    "a newer generation": lambda w: (w.family.bump(), _arg()(w))[1],
    "another stream": lambda w: (setattr(w, "stream", SimpleNamespace(ptr=STREAM + 1)), _arg()(w))[1],
    "the output still held": lambda w: _arg()(w),  # (the test holds it)
    "an output of another stream": lambda w: (w.item.__setitem__(1, STREAM + 1), _arg()(w))[1],
}

@needs_extension
@pytest.mark.parametrize("case", sorted(HAND_BACKS))
def test_any_other_call_is_handed_back_before_anything_changes(case):
    w = _world()
    held = w.record.replay((Array(IN),))  # served once: the state is no longer fresh
    if case != "the output still held":
        del held
    args = HAND_BACKS[case](w)
    before = _state(w)
    assert w.record.replay(args) is None
    assert _state(w) == before and not w.lock.locked()
    assert (w.record.served, w.record.passed) == (1, 1)


@needs_extension
def test_an_empty_ring_hands_every_call_back():
    w = _world(outputs=(("ring", 1, ()),))
    assert w.record.replay((Array(IN),)) is None and _state(w)[:2] == ([], 0)


@needs_extension
def test_the_other_bank_is_launched_when_it_holds_the_addresses():
    log: list[str] = []
    w = _world(banks=((0, 0, (IN, OTHER_OUT), lambda: log.append("bank0")),
                      (1, 0, (IN, OUT), lambda: log.append("bank1"))))
    w.log = log
    assert w.record.replay((Array(IN),)) is w.out
    assert w.log == ["bank1"] and w.counts.last_bank == 1


@needs_extension
def test_the_last_bank_counted_is_the_recordings_index_of_the_bank_not_its_place_in_the_record():
    # record_of leaves out banks that may not serve: the one kept may be the recording's third
    w = _world(banks=((2, 0, (IN, OUT), lambda: None),))
    assert w.record.replay((Array(IN),)) is w.out and w.counts.last_bank == 2


@needs_extension
def test_a_failing_launch_raises_releases_the_lock_and_counts_nothing():
    def broken():
        raise ValueError("launch failed")

    w = _world(banks=((0, 0, (IN, OUT), broken),))
    with pytest.raises(ValueError, match="launch failed"):
        w.record.replay((Array(IN),))
    assert not w.lock.locked() and (w.counts.replays, w.counts.hits) == (0, {})


@needs_extension
def test_references_count_what_holds_the_array():
    a = Array(IN)
    item = [a, STREAM, None]
    del a
    first = _replay.references(item)
    view = item[0].data  # a caller holding the memory pointer holds the memory
    assert _replay.references(item) != first
    del view
    assert _replay.references(item) == first
    with pytest.raises(TypeError, match="expected"):
        _replay.references([1, 2])


class _Entry:
    """What ``Shortcuts.compile`` asks of an entry."""

    alive = True
    constants_token = None

    def __init__(self, made):
        self.made = made

    def fast_record(self, shortcut, lock, arguments):
        self.arguments = arguments
        return self.made


def test_the_shortcuts_publish_the_record_and_take_it_back_with_its_shortcut():
    published: list = []
    shortcuts = Shortcuts(np.ndarray, (), publish=published.append)
    made = SimpleNamespace(replay=lambda args: "served")
    shortcut = Shortcut(_Entry(made), "FULL", (0,), ())
    x = np.zeros((4, 3))
    shortcuts.remember((x,), shortcut)
    shortcuts.compile(shortcut, threading.Lock(), 5, (x,))
    assert shortcut.compiled_at == 5 and published == [made] and shortcut.entry.arguments == (0,)
    refused = Shortcut(_Entry(None), "FULL", (0,), ())
    shortcuts.compile(refused, threading.Lock(), 5, (x,))
    assert refused.compiled_at == 5 and published == [made]  # a refusal keeps the one given
    shortcuts.clear()
    assert published == [made, None] and shortcut.entry is RETIRED  # (it would hold the entry's counts)


def test_the_host_reference_never_takes_the_compiled_replay():
    f = cg.jit(lambda x: x * 2.0, config=cg.CUDAGraphConfig(backend="host", capture_sizes=[4]))
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((4, 3))
        np.testing.assert_array_equal(f(x), x * 2.0)
    assert f.record is None
    assert f.stats().hits == 2 and f.registry.entries()[0].counts.hits == {4: 2}  # counted on the entry


LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


@needs_extension
def test_a_bank_with_one_executable_is_launched_through_the_driver_entry_point():
    """``graph_launch`` stands for ``cuGraphLaunch``: called with the bank's executable and the
    caller's stream; a bank without one handle, or a refusal, goes through the bank's own launch."""
    calls, status = [], [0]

    def driver(exec_handle, stream):
        calls.append((exec_handle, stream))
        return status[0]

    entry_point = LAUNCH(driver)
    w = _world(ctypes.cast(entry_point, ctypes.c_void_p).value)
    out = w.record.replay((Array(IN),))
    assert out is w.out and calls == [(0xA0, STREAM)] and w.log == []  # the driver launched it
    assert (w.counts.hits, w.counts.replays) == ({4: 1}, 1)
    del out
    # Refused before anything was queued (no current context yet; a handle or stream of another
    # context): the bank's own launch sets the context up, or reports the error as the Python path does.
    for i, refusal in enumerate((201, 3, 400, 1)):
        status[0] = refusal
        assert w.record.replay((Array(IN),)) is w.out
        assert len(calls) == 2 + i and w.log == ["bank0"] * (i + 1)
        assert not w.lock.locked()


@needs_extension
def test_a_driver_error_is_raised_never_launched_twice():
    calls = []

    def driver(exec_handle, stream):
        calls.append(exec_handle)
        return 700

    entry_point = LAUNCH(driver)
    w = _world(ctypes.cast(entry_point, ctypes.c_void_p).value)
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        w.record.replay((Array(IN),))
    assert calls == [0xA0] and w.log == []  # not retried through the bank's launch
    assert (w.counts.hits, w.counts.replays) == ({}, 0) and not w.lock.locked()


@needs_extension
@pytest.mark.parametrize("missing", ["lock", "counts", "current_stream"])
def test_a_record_missing_an_argument_names_it(missing):
    kwargs = _world().kwargs
    del kwargs[missing]
    with pytest.raises(TypeError, match=f"keyword argument {missing}"):
        _replay.Record(**kwargs)


@needs_extension
@pytest.mark.parametrize(("field", "value", "match"), [
    ("counts", object(), "counts a ReplayCounts"),
    ("family", object(), "family a FamilyState"),
    ("banks", (), "banks must be a tuple of 1 to 8"),
    ("banks", ((0, 0, (IN,), lambda: None),), "address count"),
    ("banks", ((0, 0, (IN, OUT), lambda: None), (1, 0, (IN,), lambda: None)), "addresses .one per slot"),
    ("banks", ((0, (IN, OUT), lambda: None),), r"\(index, handle, addresses, launch\)"),
    ("banks", ((-1, 0, (IN, OUT), lambda: None),), "index is 0 or more"),
    ("banks", ((0, 0, (IN, OUT, 0x10), lambda: None),), "every slot is an array's or a bound output's"),
    ("strides", (), "strides must be a tuple of 1 items"),
    ("arguments", (1,), "each array index given once"),
    ("arguments", (0, 0), "each array index given once"),
    ("arguments", (("near", 1),), "each argument is an array index"),
    ("outputs", (("ring", 0, ()),), "each slot .* exactly once"),
    ("outputs", (("ring", 5, ()),), "each slot .* exactly once"),
    ("outputs", (("copy", 1),), "each output is"),
    ("outputs", (), "outputs of 1 to"),
    ("structure", 3, "structure None"),
])
def test_a_record_checks_every_field_once(field, value, match):
    kwargs = _world().kwargs
    with pytest.raises(TypeError, match=match):
        _replay.Record(**{**kwargs, field: value})


def _function(base):
    class Function(base):
        def __init__(self):
            self.calls = []
            self.miss = self._call

        def _call(self, *args, **kwargs):
            self.calls.append((args, kwargs))
            return "python"

    return Function()


@needs_extension
def test_a_compiled_function_offers_each_call_to_its_record_first():
    w = _world()
    f = _function(_replay.FastFunction)
    assert f(Array(IN)) == "python"  # no record yet
    f.record = w.record
    assert f(Array(IN)) is w.out and len(f.calls) == 1  # served: no Python frame
    assert f(Array(IN), flag=1) == "python"  # keywords: the Python path
    assert f(Array(0x9000)) == "python"  # handed back
    assert f.calls[-1] == ((f.calls[-1][0][0],), {}) and w.record.passed == 1
    with pytest.raises(TypeError, match="Record"):
        f.record = object()
    f.record = None
    assert f(Array(IN)) == "python"
    ref = weakref.ref(f)
    f.cycle = f  # a cycle through its __dict__ (and its miss): the collector frees it
    del f
    gc.collect()
    assert ref() is None
    with pytest.raises(TypeError, match="no Python path"):
        _replay.FastFunction()()


def test_without_the_compiler_every_call_takes_the_python_path():
    f = _function(PythonFastFunction)
    assert f(1, k=2) == "python" and f.calls == [((1,), {"k": 2})]


@needs_extension
def test_a_failing_release_keeps_the_replays_error_as_its_context():
    class Lock:
        def acquire(self):
            return True

        def release(self):
            raise OSError("release failed")

    def broken():
        raise ValueError("launch failed")

    w = _world(lock=Lock(), banks=((0, 0, (IN, OUT), broken),))
    with pytest.raises(OSError, match="release failed") as info:
        w.record.replay((Array(IN),))
    assert isinstance(info.value.__context__, ValueError)


class _Broken(_Entry):
    def fast_record(self, shortcut, lock, arguments):
        raise RuntimeError("no record")


def test_a_failure_to_make_the_record_leaves_the_call_and_the_shortcut_on_the_python_path():
    published: list = []
    shortcuts = Shortcuts(np.ndarray, (), publish=published.append)
    shortcut = Shortcut(_Broken(None), "FULL", (0,), ())
    shortcuts.compile(shortcut, threading.Lock(), 3, (np.zeros(3),))  # no raise: the call itself succeeded
    assert shortcut.compiled_at == 3 and published == []


IN2 = 0x1800
SECOND_HAND_BACKS = {
    "one argument short": lambda: (Array(IN),),
    "one argument more": lambda: (Array(IN), Array(IN2), Array(IN2)),
    "the second at an address no bank holds": lambda: (Array(IN), Array(0x9000)),
    "the two swapped": lambda: (Array(IN2), Array(IN)),
    "the second of another shape": lambda: (Array(IN), Array(IN2, shape=(4, 4))),
    "the second not C-contiguous": lambda: (Array(IN), Array(IN2, strides=(8, 32))),
}


@needs_extension
@pytest.mark.parametrize("case", sorted(SECOND_HAND_BACKS))
def test_several_arguments_are_served_only_at_the_addresses_a_bank_holds_in_order(case):
    w = _world(inputs=(IN, IN2))
    assert w.record.replay((Array(IN), Array(IN2))) is w.out and w.log == ["bank0"]
    before = _state(w)
    assert w.record.replay(SECOND_HAND_BACKS[case]()) is None
    assert _state(w) == before and not w.lock.locked()


@needs_extension
def test_the_same_array_passed_twice_is_served_where_a_bank_holds_it_twice():
    w = _world(inputs=(IN, IN))
    x = Array(IN)
    assert w.record.replay((x, x)) is w.out and w.counts.hits == {4: 1}


@needs_extension
def test_a_record_takes_one_to_eight_arguments():
    w = _world()
    for shapes in ((), ((4, 3),) * 9):
        with pytest.raises(TypeError, match="1 to 8"):
            _replay.Record(**{**w.kwargs, "shapes": shapes, "strides": (STRIDES,) * len(shapes),
                              "dtypes": (DTYPE,) * len(shapes)})


@needs_extension
def test_a_record_never_initialised_hands_every_call_back():
    assert _replay.Record.__new__(_replay.Record).replay((Array(IN),)) is None


@needs_extension
def test_with_several_gpus_an_array_of_another_device_is_handed_back_before_the_lock():
    class Lock:
        acquired = 0

        def acquire(self):
            Lock.acquired += 1
            return True

        def release(self):
            pass

    w = _world(lock=Lock(), device=0)
    elsewhere = Array(IN)
    elsewhere.data.device_id = 1  # (the same address, freed on device 0 and reused on device 1)
    before = _state(w)
    assert w.record.replay((elsewhere,)) is None
    assert _state(w) == before and Lock.acquired == 0
    assert w.record.replay((Array(IN),)) is w.out and Lock.acquired == 1


@needs_extension
def test_a_record_never_changes_and_shapes_must_be_tuples():
    w = _world()
    with pytest.raises(TypeError, match="records never change"):
        w.record.__init__(**{**w.kwargs, "graph_launch": 1})  # (an address that would crash if taken)
    assert w.record.replay((Array(IN),)) is w.out and w.log == ["bank0"]
    with pytest.raises(TypeError, match="each of shapes and strides must be a tuple"):
        _replay.Record(**{**w.kwargs, "shapes": ([4, 3],)})


def test_the_counts_and_the_generation_have_python_stand_ins_with_the_same_fields():
    from cupygraph.backends.fastpath.compiled import PythonFamilyState, PythonReplayCounts

    for counts in (PythonReplayCounts(),) + ((_replay.ReplayCounts(),) if _replay else ()):
        assert (counts.replays, counts.bound_calls, counts.last_used, counts.last_bank, counts.hits) == (0, 0, 0, 0, {})
        counts.replays += 1
        assert counts.replays == 1
    for family in (PythonFamilyState(),) + ((_replay.FamilyState(),) if _replay else ()):
        before = family.generation
        family.bump()
        assert family.generation == before + 1
