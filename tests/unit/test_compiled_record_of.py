"""Which of a recording's banks a compiled record may launch (``record_of`` in
``cupygraph/backends/fastpath/record.py``): a call is served only at a bank's own addresses, so the checks
that depend on those addresses alone are made once, when the record is made. A bank whose constant slot
holds another address, or where an array the function writes into overlaps another argument, is left out,
and a call at its addresses is handed back to the Python path (which rebinds, or raises ``AliasedWrite`` and
runs the call eagerly).

``record.py`` imports CuPy; here it is loaded on its own with a stand-in ``cupy`` whose ``ndarray`` is the
plain ``Array`` below (what the replay reads of an array), never entering ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cupygraph.pytree import LEAF

try:
    from cupygraph.backends.fastpath import _replay
except ImportError:  # pragma: no cover - no C compiler where the package was installed
    _replay = None

pytestmark = pytest.mark.skipif(_replay is None, reason="the compiled replay is not built here")

STREAM = 7
DTYPE = np.dtype(np.float32)
SHAPE = (4,)  # 16 bytes an array
X, Y, W, OUT = 0x1000, 0x2000, 0x3000, 0x4000
RECORD_PY = Path(__file__).resolve().parents[2] / "cupygraph" / "backends" / "fastpath" / "record.py"


class _Pointer:
    def __init__(self, ptr):
        self.ptr, self.mem, self.device_id = ptr, object(), 0


class Array:
    def __init__(self, ptr, shape=SHAPE, dtype=DTYPE):
        self.data, self.shape, self.dtype, self.strides = _Pointer(ptr), shape, dtype, (dtype.itemsize,)


@pytest.fixture
def record_module(monkeypatch):
    fake = types.ModuleType("cupy")
    fake.ndarray = Array
    fake.cuda = SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=STREAM))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    spec = importlib.util.spec_from_file_location("cupygraph.backends.fastpath.record", RECORD_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.graph_launch_address = lambda: 0  # every bank through its own launch, even where libcuda is
    return module


def _record(module, banks, *, arrays=1, arguments=None, written=(), fixed=(), family_memory=(), static=0x9000):
    """``record_of`` for one ringed output (slot ``arrays``) and the given banks' addresses (every slot's:
    arguments, the output, then constants); returns the record, the launch log, the counts and the output."""
    log: list[int] = []
    out = Array(OUT)
    item = [out, STREAM, None]
    item[2] = _replay.references(item)
    family = _replay.FamilyState()
    entry = SimpleNamespace(
        backend=SimpleNamespace(last_stream_ptr=lambda: STREAM, device_id=0, per_device=False, family=family,
                                owns=lambda ptr: any(lo <= ptr < hi for lo, hi in family_memory)),
        written=written, spec=LEAF, counts=_replay.ReplayCounts())
    recording = SimpleNamespace(
        single=True, handle=lambda bank: 0,
        banks=[SimpleNamespace(index=k, current=list(current), launch=lambda k=k: log.append(k))
               for k, current in enumerate(banks)])
    inputs = [SimpleNamespace(shape_dtype=(SHAPE, DTYPE), static_address=static + 64 * i) for i in range(arrays)]
    record = module.record_of(
        SimpleNamespace(rows=4), entry, recording, tuple(range(arrays)) if arguments is None else arguments, inputs,
        (("ring", arrays, (item,)),), fixed, threading.Lock())
    return record, log, entry.counts, out


def test_a_call_whose_written_argument_overlaps_another_is_never_served(record_module):
    # Argument 0 is written into; at the first bank's addresses it shares bytes 8-16 with argument 1.
    record, log, counts, out = _record(record_module, [(X, X + 8, OUT), (X, Y, OUT)], arrays=2, written=(0,))
    assert record.replay((Array(X), Array(X + 8))) is None and log == []  # the Python path: AliasedWrite
    assert record.replay((Array(X), Array(Y))) is out and log == [1] and counts.last_bank == 1
    alone, _, _, _ = _record(record_module, [(X, X + 8, OUT)], arrays=2, written=(0,))
    assert alone is None  # no bank left: no record


@pytest.mark.parametrize(("second", "served"), [(X + 16, True), (X + 15, False), (X - 15, False), (X - 16, True)])
def test_bytes_overlap_as_half_open_spans(record_module, second, served):
    record, log, _, out = _record(record_module, [(X, second, OUT)], arrays=2, written=(1,))
    assert (record is not None) is served
    if served:
        assert record.replay((Array(X), Array(second))) is out and log == [0]


def test_arguments_only_read_may_overlap(record_module):
    record, log, _, out = _record(record_module, [(X, X + 8, OUT)], arrays=2, written=())
    assert record.replay((Array(X), Array(X + 8))) is out and log == [0]


def test_a_bank_whose_constant_slot_holds_another_address_is_never_launched(record_module):
    weights = object()
    # Both banks hold the call's addresses; only the second holds the constant's (slot 2).
    record, log, counts, out = _record(record_module, [(X, OUT, W + 64), (X, OUT, W)],
                                       arguments=(0, ("same", weights)), fixed=((2, W),))
    assert record.replay((Array(X), weights)) is out and log == [1] and counts.last_bank == 1
    alone, _, _, _ = _record(record_module, [(X, OUT, W + 64)], arguments=(0, ("same", weights)), fixed=((2, W),))
    assert alone is None


def test_a_bank_whose_argument_slot_holds_the_familys_memory_is_never_launched(record_module):
    """An ``output_mode="view"`` output passed back lies in the family's pool, which the graph may write before it
    reads the argument: the Python path copies it (``CupyBinder.bind``), and a bank that once held that address
    (the memory a caller's array had, taken by the pool since) serves no call. A slot at its own static buffer
    (also the family's memory) reads what a copy would have put there: served."""
    pool = ((X, X + 4096),)
    record, log, _, out = _record(record_module, [(X, OUT), (Y, OUT)], family_memory=pool)
    assert record.replay((Array(X),)) is None and log == []
    assert record.replay((Array(Y),)) is out and log == [1]
    alone, _, _, _ = _record(record_module, [(X, OUT)], family_memory=pool)
    assert alone is None
    static, log, _, out = _record(record_module, [(X, OUT)], family_memory=pool, static=X)
    assert static.replay((Array(X),)) is out and log == [0]
