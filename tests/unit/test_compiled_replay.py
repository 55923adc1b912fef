"""The compiled replay (``cupygraph/backends/_replay.c``) on the CPU: what it serves, what it hands back
untouched, and that it leaves the shared state as the Python path would.

The extension reads attributes by name; here plain Python objects carry those attributes (the GPU
test ``tests/gpu/test_fast_replay.py`` drives it on the real CuPy objects). Each hand-back case
changes one condition of a call that is otherwise served, and checks that nothing moved.
"""

from __future__ import annotations

import copy
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
from cupygraph.api.plans import RETIRED, Plan, PlanCache
from cupygraph.backends.compiled import PythonFastFunction

try:
    from cupygraph.backends import _replay
except ImportError:  # pragma: no cover - no C compiler where the package was installed
    _replay = None

COMPILER = shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")


def test_the_extension_is_built_wherever_a_compiler_is():
    if COMPILER is None:
        pytest.skip("no C compiler here: cupygraph replays through its Python path")
    assert importlib.util.find_spec("cupygraph.backends._replay") is not None, (
        "a C compiler is installed but cupygraph/backends/_replay.c was not built (pip install -e . builds it)")


needs_extension = pytest.mark.skipif(_replay is None, reason="the compiled replay is not built here")

IN, OUT, OTHER_OUT, STREAM = 0x1000, 0x2000, 0x3000, 7
DTYPE = object()  # compared by identity, as NumPy's dtypes are


class _Memory:
    pass


class _Pointer:
    def __init__(self, ptr, device_id=0):
        self.ptr, self.mem, self.device_id = ptr, _Memory(), device_id


class Array:
    """What the replay reads of a CuPy array."""

    def __init__(self, ptr, shape=(4, 3), dtype=DTYPE, contiguous=True):
        self.data, self.shape, self.dtype, self._c_contiguous = _Pointer(ptr), shape, dtype, contiguous


class Bank:
    def __init__(self, name, current, log, handle):
        self.current, self.fresh, self.handle = list(current), True, handle
        self.launch = lambda: log.append(name)


def _world(graph_launch=0, inputs=(IN,), **overrides):
    """A plan, entry, binder with two banks, backend and ring, as the replay reads them, and its
    Replayer; ``overrides`` replace the Replayer's keyword arguments (``w.kwargs``)."""
    log: list[str] = []
    banks = [Bank("bank0", [*inputs, OUT], log, 0xA0), Bank("bank1", [*inputs, OTHER_OUT], log, 0)]
    stream = SimpleNamespace(ptr=STREAM)
    w = SimpleNamespace(log=log, banks=banks, stream=stream, lock=threading.Lock(), ticks=iter(range(100, 200)))
    w.recording = SimpleNamespace(launch=banks[0].launch)
    w.binder = SimpleNamespace(_active=banks[0], _banks=banks, away=False, _calls=0, recording=w.recording)
    w.entry = SimpleNamespace(alive=True, constants_token=None, replay_count=0, last_used=0, backend=None)
    w.entry.run = lambda *a: pytest.fail("the Python path was called")
    w.plan = SimpleNamespace(entry=w.entry, hits=0)
    w.backend = SimpleNamespace(_last_stream=stream)
    w.out = Array(OUT)
    item = [w.out, STREAM, None]
    item[2] = _replay.references(item)
    w.slot = SimpleNamespace(ring=[item])
    w.kwargs = dict(
        array_type=Array, shapes=((4, 3),) * len(inputs), dtypes=(DTYPE,) * len(inputs), plan=w.plan, entry=w.entry,
        token=None, run=w.entry.run, binder=w.binder, slot=w.slot, recording=w.recording, backend=w.backend,
        lock=w.lock, current_stream=lambda: w.stream, use_tick=lambda: next(w.ticks), graph_launch=graph_launch)
    w.kwargs.update(overrides)
    w.lock = w.kwargs["lock"]
    w.replayer = _replay.Replayer(**w.kwargs)
    return w


def _state(w):
    """Everything a call may change, as plain values."""
    return (list(w.log), w.binder._active is w.banks[0], w.binder.away, w.binder._calls, w.recording.launch,
            [b.fresh for b in w.banks], w.entry.replay_count, w.entry.last_used, w.plan.hits,
            w.backend._last_stream)


@needs_extension
def test_a_steady_call_is_served_with_the_python_paths_bookkeeping():
    w = _world()
    out = w.replayer.replay((Array(IN),))
    assert out is w.out
    assert w.log == ["bank0"]
    assert (w.binder._calls, w.entry.replay_count, w.plan.hits, w.entry.last_used) == (1, 1, 1, 100)
    assert w.binder.away is True and w.banks[0].fresh is False and w.banks[1].fresh is True
    assert not w.lock.locked()
    del out  # the caller lets go: the ring's array is taken again
    assert w.replayer.replay((Array(IN),)) is w.out
    assert (w.replayer.served, w.replayer.passed, w.plan.hits, w.entry.last_used) == (2, 0, 2, 101)


def _arg(**change):
    return lambda w: (Array(change.get("ptr", IN), change.get("shape", (4, 3)), change.get("dtype", DTYPE),
                            change.get("contiguous", True)),)


HAND_BACKS = {
    "another shape": lambda w: _arg(shape=(5, 3))(w),
    "another dtype": lambda w: _arg(dtype=object())(w),
    "not C-contiguous": lambda w: _arg(contiguous=False)(w),
    "an address no bank holds": lambda w: _arg(ptr=0x9000)(w),
    "two arguments": lambda w: (Array(IN), Array(IN)),
    "another array type": lambda w: (np.zeros((4, 3)),),
    "a retired plan": lambda w: (setattr(w.plan, "entry", RETIRED), _arg()(w))[1],
    "a released entry": lambda w: (setattr(w.entry, "alive", False), _arg()(w))[1],
    "rebound constants": lambda w: (setattr(w.entry, "constants_token", object()), _arg()(w))[1],
    "a run that writes back": lambda w: (setattr(w.entry, "run", lambda *a: None), _arg()(w))[1],
    "another stream": lambda w: (setattr(w, "stream", SimpleNamespace(ptr=STREAM + 1)), _arg()(w))[1],
    "no replay on any stream yet": lambda w: (setattr(w.backend, "_last_stream", None), _arg()(w))[1],
    "the output still held": lambda w: _arg()(w),  # (the test holds it)
    "an output of another stream": lambda w: (w.slot.ring[0].__setitem__(1, STREAM + 1), _arg()(w))[1],
    "an empty ring": lambda w: (w.slot.ring.clear(), _arg()(w))[1],
}


@needs_extension
@pytest.mark.parametrize("case", sorted(HAND_BACKS))
def test_any_other_call_is_handed_back_before_anything_changes(case):
    w = _world()
    args = HAND_BACKS[case](w)
    held = w.out if case == "the output still held" else None  # noqa: F841  (the caller keeps the last output)
    before = _state(w)
    assert w.replayer.replay(args) is None
    assert _state(w) == before
    assert not w.lock.locked()
    assert (w.replayer.served, w.replayer.passed) == (0, 1)


@needs_extension
def test_the_other_bank_is_switched_to_when_it_holds_the_addresses():
    w = _world()
    kept = w.replayer.replay((Array(IN),))  # the caller keeps bank0's output
    item = [Array(OTHER_OUT), STREAM, None]  # measured while only the ring holds it, as the binder does
    item[2] = _replay.references(item)
    w.slot.ring.append(item)
    del item
    out = w.replayer.replay((Array(IN),))
    assert out.data.ptr == OTHER_OUT and out is not kept
    assert w.log == ["bank0", "bank1"]
    assert w.binder._active is w.banks[1] and w.recording.launch is w.banks[1].launch
    assert w.banks[1].fresh is False


@needs_extension
def test_the_same_stream_in_another_object_is_taken_as_the_python_path_takes_it():
    w = _world()
    w.stream = copy.copy(w.stream)  # same pointer, another object
    assert w.replayer.replay((Array(IN),)) is w.out
    assert w.backend._last_stream is w.stream


@needs_extension
def test_a_failing_launch_raises_releases_the_lock_and_counts_no_hit():
    w = _world()

    def broken():
        raise RuntimeError("launch failed")

    w.recording.launch = broken
    with pytest.raises(RuntimeError, match="launch failed"):
        w.replayer.replay((Array(IN),))
    assert not w.lock.locked()
    assert (w.plan.hits, w.entry.replay_count) == (0, 0)
    w.recording.launch = w.banks[0].launch  # the process stays usable
    assert w.replayer.replay((Array(IN),)) is w.out and w.plan.hits == 1


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
    """What ``PlanCache.compile`` asks of an entry."""

    alive = True
    constants_token = None

    def __init__(self, made):
        self.made = made

    def fast_replayer(self, plan, lock):
        return self.made


def test_the_plan_cache_publishes_the_replay_and_takes_it_back_with_its_plan():
    published: list = []
    cache = PlanCache(np.ndarray, (), publish=published.append)
    made = SimpleNamespace(replay=lambda args: "served")
    made.plan = plan = Plan(_Entry(made), "FULL", (0,), ())
    x = np.zeros((4, 3))
    cache.remember((x,), plan)
    cache.compile(plan, threading.Lock())
    assert plan.fast is True and published == [made]
    refused = Plan(_Entry(None), "FULL", (0,), ())
    cache.compile(refused, threading.Lock())
    assert refused.fast is False and published == [made]  # a refusal keeps the one given
    cache.clear()
    assert published == [made, None] and plan.entry is RETIRED  # (it would hold the entry's graphs)


def test_the_host_reference_never_takes_the_compiled_replay():
    f = cg.jit(lambda x: x * 2.0, config=cg.CUDAGraphConfig(backend="host", capture_sizes=[4]))
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((4, 3))
        np.testing.assert_array_equal(f(x), x * 2.0)
    assert f._replayer is None


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
    out = w.replayer.replay((Array(IN),))
    assert out is w.out and calls == [(0xA0, STREAM)] and w.log == []  # the driver launched it
    assert (w.plan.hits, w.entry.replay_count) == (1, 1)
    del out
    # Refused before anything was queued (no current context yet; a handle or stream of another
    # context): the bank's own launch sets the context up, or reports the error as the Python path does.
    for i, refusal in enumerate((201, 3, 400, 1)):
        status[0] = refusal
        assert w.replayer.replay((Array(IN),)) is w.out
        assert len(calls) == 2 + i and w.log == ["bank0"] * (i + 1)
        assert not w.lock.locked()


@needs_extension
def test_a_replayer_missing_an_argument_names_it():
    kwargs = _world().kwargs
    del kwargs["use_tick"]
    with pytest.raises(TypeError, match="keyword argument use_tick"):
        _replay.Replayer(**kwargs)


def _function(base):
    class Function(base):
        def __init__(self):
            self.calls = []

        def _call(self, *args, **kwargs):
            self.calls.append((args, kwargs))
            return "python"

    return Function()


@needs_extension
def test_a_compiled_function_offers_each_call_to_its_replayer_first():
    w = _world()
    f = _function(_replay.FastFunction)
    assert f(Array(IN)) == "python"  # no replayer yet
    f._replayer = w.replayer
    assert f(Array(IN)) is w.out and len(f.calls) == 1  # served: no Python frame
    assert f(Array(IN), flag=1) == "python"  # keywords: the Python path
    assert f(Array(0x9000)) == "python"  # handed back
    assert f.calls[-1] == ((f.calls[-1][0][0],), {}) and w.replayer.passed == 1
    with pytest.raises(TypeError, match="Replayer"):
        f._replayer = object()
    f._replayer = None
    assert f(Array(IN)) == "python"
    ref = weakref.ref(f)
    f.cycle = f  # a cycle through its __dict__: the collector frees it
    del f
    gc.collect()
    assert ref() is None


def test_without_the_compiler_every_call_takes_the_python_path():
    f = _function(PythonFastFunction)
    assert f(1, k=2) == "python" and f.calls == [((1,), {"k": 2})]


@needs_extension
def test_a_driver_error_is_raised_never_launched_twice_and_a_wrapped_launch_is_kept():
    calls, status = [], [700]

    def driver(exec_handle, stream):
        calls.append(exec_handle)
        return status[0]

    entry_point = LAUNCH(driver)
    w = _world(ctypes.cast(entry_point, ctypes.c_void_p).value)
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        w.replayer.replay((Array(IN),))
    assert calls == [0xA0] and w.log == []  # not retried through the bank's launch
    assert (w.plan.hits, w.entry.replay_count) == (0, 0) and not w.lock.locked()
    status[0] = 0
    w.recording.launch = lambda: w.log.append("wrapped")  # e.g. a profiler's wrapper: it must run
    assert w.replayer.replay((Array(IN),)) is w.out
    assert w.log == ["wrapped"] and calls == [0xA0]


@needs_extension
def test_a_failing_release_keeps_the_replays_error_as_its_context():
    class Lock:
        def acquire(self):
            return True

        def release(self):
            raise OSError("release failed")

    w = _world(lock=Lock())

    def broken():
        raise ValueError("launch failed")

    w.recording.launch = broken
    with pytest.raises(OSError, match="release failed") as info:
        w.replayer.replay((Array(IN),))
    assert isinstance(info.value.__context__, ValueError)


class _Broken(_Entry):
    def fast_replayer(self, plan, lock):
        raise RuntimeError("no replayer")


def test_a_failure_to_make_the_replay_leaves_the_call_and_the_plan_on_the_python_path():
    published: list = []
    cache = PlanCache(np.ndarray, (), publish=published.append)
    plan = Plan(_Broken(None), "FULL", (0,), ())
    cache.compile(plan, threading.Lock())  # does not raise: the call that asked already succeeded
    assert plan.fast is False and published == []


IN2 = 0x1800
SECOND_HAND_BACKS = {
    "one argument short": lambda: (Array(IN),),
    "one argument more": lambda: (Array(IN), Array(IN2), Array(IN2)),
    "the second at an address no bank holds": lambda: (Array(IN), Array(0x9000)),
    "the two swapped": lambda: (Array(IN2), Array(IN)),
    "the second of another shape": lambda: (Array(IN), Array(IN2, shape=(4, 4))),
    "the second not C-contiguous": lambda: (Array(IN), Array(IN2, contiguous=False)),
}


@needs_extension
@pytest.mark.parametrize("case", sorted(SECOND_HAND_BACKS))
def test_several_arguments_are_served_only_at_the_addresses_a_bank_holds_in_order(case):
    w = _world(inputs=(IN, IN2))
    assert w.replayer.replay((Array(IN), Array(IN2))) is w.out and w.log == ["bank0"]
    before = _state(w)
    assert w.replayer.replay(SECOND_HAND_BACKS[case]()) is None
    assert _state(w) == before and not w.lock.locked()


@needs_extension
def test_the_same_array_passed_twice_is_served_where_a_bank_holds_it_twice():
    w = _world(inputs=(IN, IN))
    x = Array(IN)
    assert w.replayer.replay((x, x)) is w.out and w.plan.hits == 1


@needs_extension
def test_a_replayer_takes_one_to_eight_arguments():
    w = _world()
    for shapes in ((), ((4, 3),) * 9):
        with pytest.raises(TypeError, match="1 to 8"):
            _replay.Replayer(**{**w.kwargs, "shapes": shapes, "dtypes": (DTYPE,) * len(shapes)})


@needs_extension
def test_a_replayer_never_initialised_hands_every_call_back():
    assert _replay.Replayer.__new__(_replay.Replayer).replay((Array(IN),)) is None


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
    assert w.replayer.replay((elsewhere,)) is None
    assert _state(w) == before and Lock.acquired == 0
    assert w.replayer.replay((Array(IN),)) is w.out and Lock.acquired == 1


@needs_extension
def test_a_refused_second_init_changes_nothing_and_shapes_must_be_tuples():
    w = _world()
    with pytest.raises(TypeError, match="already initialised"):
        w.replayer.__init__(**{**w.kwargs, "graph_launch": 1})  # (an address that would crash if taken)
    assert w.replayer.replay((Array(IN),)) is w.out and w.log == ["bank0"]
    with pytest.raises(TypeError, match="each of shapes must be a tuple"):
        _replay.Replayer(**{**w.kwargs, "shapes": ([4, 3],)})
