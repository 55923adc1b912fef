"""cuBLASLt plans: one GEMM shape's descriptors, and the algorithm chosen for it once.

* **The algorithm** is chosen once per ``LtKey`` (shape, layouts, batch strides, dtype, epilogue,
  pointer mode, the alignment of every address and the workspace size) and kept for the process
  (``gemm_plans()`` lists them): cuBLASLt's heuristic (``cublasLtMatmulAlgoGetHeuristic``) proposes
  up to eight, and the fastest of them on the key's first product is kept (``_lt_tuning``; with
  ``CUPYGRAPH_GEMM_TUNING=heuristic``, the heuristic's first, untimed). Every thread, eager call and
  capture of a key then runs the same kernel, so a replay equals an eager call bit for bit; one row,
  skinny, square and batched shapes each get the kernel that ran fastest for that shape. Never
  chosen per replay: a graph holds the kernel it recorded. Beyond ``MAX_CHOICES`` keys a key is
  chosen again by each new plan of it, so it keeps the heuristic's first, untimed (the same each time).
* **The descriptors** (operation, A/B/C layouts) are per thread (``PlanCache``, kept by the
  thread's cuBLASLt handle): the bias address is an attribute of the operation descriptor, set
  before each call whose bias moved.
* **Nothing is made while a stream captures**: a key the thread has no plan for then raises
  ``CaptureError`` (run the function once first; ``jit``'s warm-up does).
* **No algorithm**: where the heuristic has none (an epilogue cuBLASLt lacks for that dtype), the
  choice keeps the reason and the caller runs the product unfused (a GEMM, then the epilogue kernel).

Binding-neutral and CuPy-free: the binding (``_lt_binding``) and all addresses come in as arguments.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import numpy as np

from ..errors import CaptureError
from ..logs import logger
from ..reasons import FallbackReason
from ._binding import COMPUTE_TYPE, DATA_TYPE, OP_N, OP_T
from ._library import CublasError
from ._lt_binding import (
    DESC_BIAS_POINTER,
    DESC_EPILOGUE,
    DESC_POINTER_MODE,
    DESC_TRANSA,
    DESC_TRANSB,
    EPILOGUE_BIAS,
    EPILOGUE_DEFAULT,
    EPILOGUE_GELU,
    EPILOGUE_GELU_BIAS,
    EPILOGUE_RELU,
    EPILOGUE_RELU_BIAS,
    LAYOUT_BATCH_COUNT,
    LAYOUT_STRIDED_BATCH_OFFSET,
    PREF_MAX_WORKSPACE_BYTES,
    PREF_MIN_ALIGNMENT,
    STATUS_INVALID_VALUE,
    STATUS_NOT_SUPPORTED,
    Algo,
    LtBinding,
)
from ._lt_tuning import Timer, fastest, requested_proposals
from ._shapes import GemmCall

EPILOGUES = {(False, None): EPILOGUE_DEFAULT, (False, "relu"): EPILOGUE_RELU, (False, "gelu"): EPILOGUE_GELU,
             (True, None): EPILOGUE_BIAS, (True, "relu"): EPILOGUE_RELU_BIAS, (True, "gelu"): EPILOGUE_GELU_BIAS}
"""cublasLtEpilogue_t for (has a bias, activation)."""
EPILOGUE_NAMES = {code: "+".join(part for part in ("bias" if bias else "", activation or "") if part) or "none"
                  for (bias, activation), code in EPILOGUES.items()}
SCALE_TYPE = {"e": DATA_TYPE["f"], "f": DATA_TYPE["f"], "d": DATA_TYPE["d"]}  # float16 scales in float32
MAX_ALIGNMENT = 256  # cuBLASLt's default assumption; an address is never asked for more
MAX_PLANS = 1024  # per thread: descriptors of the least recently used key are destroyed beyond it
MAX_CHOICES = 4096  # keys whose algorithm is kept; later ones run the heuristic's first, untimed


class LtKey(NamedTuple):
    """Everything a cuBLASLt algorithm choice depends on (cuBLAS's column-major terms)."""

    device: int
    dtype: str  # the operands' dtype char: "e", "f" or "d"
    call: GemmCall  # transposes, m, n, k, leading dimensions, batch and batch strides (and which operand is A)
    epilogue: int
    pointer_mode: int
    alignments: tuple[int, int, int, int]  # of A, B, C (= D) and the bias, in bytes
    workspace_bytes: int


def alignment(address: int) -> int:
    """The largest power of two (up to 256) dividing ``address``."""
    return min(MAX_ALIGNMENT, address & -address) if address else MAX_ALIGNMENT


class Choice(NamedTuple):
    algo: Optional[Algo]  # None: no algorithm, run unfused
    reason: str  # why unfused ("" when fused)
    proposals: int = 0  # how many the heuristic proposed
    chosen: int = 0  # which of them is kept, in the heuristic's order
    seconds: tuple[float, ...] = ()  # each proposal's time per call where they were timed


_choices: dict[LtKey, Choice] = {}
_choices_lock = threading.Lock()


def _set(setter: Any, target: int, spec: tuple[int, Any], value: int) -> None:
    attr, ctype = spec
    setter(target, attr, ctype(value))


class Plan:
    """One key's descriptors in one thread and the algorithm chosen for the key."""

    def __init__(self, lib: LtBinding, key: LtKey):
        self.key = key
        self.bias_ptr = 0
        self._lib = lib
        self.desc = self.a = self.b = self.c = 0
        self.algo: Optional[Algo] = None
        try:
            self._describe(lib, key)
        except BaseException:
            self.close()
            raise

    def _describe(self, lib: LtBinding, key: LtKey) -> None:
        self.desc = lib.desc_create(COMPUTE_TYPE[key.dtype], SCALE_TYPE[key.dtype])
        _set(lib.desc_set, self.desc, DESC_TRANSA, OP_T if key.call.trans_a else OP_N)
        _set(lib.desc_set, self.desc, DESC_TRANSB, OP_T if key.call.trans_b else OP_N)
        _set(lib.desc_set, self.desc, DESC_POINTER_MODE, key.pointer_mode)
        _set(lib.desc_set, self.desc, DESC_EPILOGUE, key.epilogue)
        # A layout describes the matrix as stored (before op): op(A) is m x k, op(B) k x n, C m x n.
        data, call = DATA_TYPE[key.dtype], key.call
        self.a = lib.layout_create(data, *((call.k, call.m) if call.trans_a else (call.m, call.k)), call.lda)
        self.b = lib.layout_create(data, *((call.n, call.k) if call.trans_b else (call.k, call.n)), call.ldb)
        self.c = lib.layout_create(data, call.m, call.n, call.ldc)
        if call.batch > 1:
            for layout, stride in ((self.a, call.stride_a), (self.b, call.stride_b), (self.c, call.stride_c)):
                _set(lib.layout_set, layout, LAYOUT_BATCH_COUNT, call.batch)
                _set(lib.layout_set, layout, LAYOUT_STRIDED_BATCH_OFFSET, stride)

    def set_bias(self, bias_ptr: int) -> None:
        if bias_ptr != self.bias_ptr:
            _set(self._lib.desc_set, self.desc, DESC_BIAS_POINTER, bias_ptr)
            self.bias_ptr = bias_ptr

    def close(self) -> None:
        lib = self._lib
        for destroy, made in ((lib.layout_destroy, self.c), (lib.layout_destroy, self.b),
                              (lib.layout_destroy, self.a), (lib.desc_destroy, self.desc)):
            if made:
                destroy(made)
        self.desc = self.a = self.b = self.c = 0


class Trial(NamedTuple):
    """What timing a key's proposals needs: the first product's operands, its stream and a timer."""

    timer: Timer
    operands: Operands
    workspace: int
    workspace_bytes: int
    stream: int


def _ask_heuristic(lib: LtBinding, handle: int, plan: Plan) -> list[Algo]:
    key = plan.key
    pref = lib.pref_create()
    try:
        _set(lib.pref_set, pref, PREF_MAX_WORKSPACE_BYTES, key.workspace_bytes)
        align_a, align_b, align_c, align_bias = key.alignments
        # D is C here; a bias read with D's vector width must be as aligned as D is assumed to be.
        has_bias = bool(key.epilogue & EPILOGUE_BIAS)
        for name, value in (("a", align_a), ("b", align_b), ("c", align_c),
                            ("d", min(align_c, align_bias) if has_bias else align_c)):
            _set(lib.pref_set, pref, PREF_MIN_ALIGNMENT[name], value)
        return lib.heuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, requested_proposals())
    finally:
        lib.pref_destroy(pref)


def _result_extent(key: LtKey) -> int:
    """Bytes from D's first element to past its last (C = D), for a scratch result of the same layout."""
    call = key.call
    elements = (call.batch - 1) * call.stride_c + (call.n - 1) * call.ldc + call.m
    return elements * np.dtype(key.dtype).itemsize


def _timed(lib: LtBinding, handle: int, plan: Plan, proposals: list[Algo], trial: Trial) -> Choice:
    """The fastest proposal on the trial's operands, each writing a scratch result (C and D) so the
    caller's result and its ``beta * C`` input stay untouched."""
    ops = trial.operands

    def run(algo: Algo) -> Callable[[int], None]:
        return lambda stream: lib.matmul(handle, plan.desc, ops.alpha, ops.a, plan.a, ops.b, plan.b, ops.beta,
                                         scratch, plan.c, scratch, plan.c, ctypes.addressof(algo), trial.workspace,
                                         trial.workspace_bytes, stream)

    try:
        # Inside the try: a scratch result the device cannot hold (a large product near the memory's end)
        # costs the timing, never the product, which needs no scratch.
        scratch = trial.timer.scratch(_result_extent(plan.key))
        timed = fastest(proposals, run, trial.timer, (CublasError,), trial.stream)
    except Exception as err:  # timing is an optimisation: the heuristic's first answer still runs correctly
        logger.warning("cupygraph.linalg: timing cuBLASLt's proposals for %s failed (%s: %s); keeping the "
                       "heuristic's first", describe(plan.key), type(err).__name__, err)
        return Choice(proposals[0], "", len(proposals))
    return Choice(proposals[timed.chosen], "", len(proposals), timed.chosen, timed.seconds)


def _choice(lib: LtBinding, handle: int, plan: Plan, trial: Optional[Trial]) -> Choice:
    try:
        proposals = _ask_heuristic(lib, handle, plan)
    except CublasError as err:
        if err.status not in (STATUS_INVALID_VALUE, STATUS_NOT_SUPPORTED):
            raise
        return Choice(None, str(err))
    if not proposals:
        return Choice(None, "cuBLASLt's heuristic proposed no algorithm")
    if len(proposals) == 1 or trial is None:
        return Choice(proposals[0], "", len(proposals))
    return _timed(lib, handle, plan, proposals, trial)


def choose(lib: LtBinding, handle: int, plan: Plan, trial: Optional[Trial] = None) -> Choice:
    """The key's algorithm: chosen the first time (timed where ``trial`` allows), then the same for the
    process."""
    with _choices_lock:
        found = _choices.get(plan.key)
        room = len(_choices) < MAX_CHOICES
    if found is not None:
        return found
    # A key the table cannot keep is chosen again by every new plan of it (another thread's, or after its
    # plan was dropped): the heuristic's first answer is the same each time, a timing need not be.
    choice = _choice(lib, handle, plan, trial if room else None)
    if choice.algo is None:
        logger.info("cupygraph.linalg: no cuBLASLt algorithm for %s (%s): that GEMM and its epilogue run unfused",
                    describe(plan.key), choice.reason)
    with _choices_lock:
        kept = len(_choices) < MAX_CHOICES or plan.key in _choices
        if kept:
            choice = _choices.setdefault(plan.key, choice)  # a thread that chose first wins: one kernel per key
    if not kept and choice.seconds:  # timed while other keys filled the table: not kept, so not timed either
        choice = _choice(lib, handle, plan, None)
    return choice


class PlanCache:
    """One thread's plans (its cuBLASLt handle keeps it); closed with the handle."""

    def __init__(self, lib: LtBinding):
        self._lib = lib
        self._plans: OrderedDict[LtKey, Plan] = OrderedDict()

    def find(self, key: LtKey) -> Optional[Plan]:
        """The key's plan where this thread made one (kept as the most recently used), else None."""
        found = self._plans.get(key)
        if found is not None:
            self._plans.move_to_end(key)
        return found

    def make(self, key: LtKey, handle: int, bias_ptr: int, capturing: bool, trial: Optional[Trial] = None) -> Plan:
        """A new plan of ``key`` (its algorithm chosen, timed where ``trial`` allows); refused while
        ``capturing``."""
        if capturing:
            raise CaptureError(
                f"{FallbackReason.LIBRARY_CALL.text}: cupygraph.linalg has no cuBLASLt plan for {describe(key)} in "
                "this thread yet, and choosing one during a capture is not done; run the function once on arrays "
                "of the same shapes before capturing (jit's num_warmups >= 1 does)")
        plan = Plan(self._lib, key)
        try:
            if key.epilogue & EPILOGUE_BIAS:
                plan.set_bias(bias_ptr)  # the heuristic may read it
            choice = choose(self._lib, handle, plan, trial)
        except BaseException:
            plan.close()
            raise
        plan.algo = choice.algo
        self._plans[key] = plan
        if len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)[1].close()
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def close(self) -> None:
        while self._plans:
            self._plans.popitem()[1].close()


class Operands(NamedTuple):
    """The addresses one fused product reads and writes (``bias`` 0 where there is none)."""

    a: int
    b: int
    c: int
    bias: int
    alpha: int
    beta: int


def execute(lib: LtBinding, handle: int, plans: PlanCache, device: int, call: GemmCall, dtype: str, epilogue: int,
            pointer_mode: int, operands: Operands, workspace: int, workspace_bytes: int, stream: int,
            capturing: bool, make_timer: Optional[Callable[[], Timer]] = None) -> bool:
    """``c = epilogue(alpha * op(a) @ op(b) + beta * c)`` for ``call`` (cuBLAS's
    A = ``operands.a``) on its key's plan; False where the key has no algorithm (run it unfused).
    ``make_timer``: where given, a key's first product times the heuristic's proposals on ``stream`` with the
    timer it makes (made only then: a product whose plan exists makes none)."""
    key = LtKey(device, dtype, call, epilogue, pointer_mode,
                (alignment(operands.a), alignment(operands.b), alignment(operands.c),
                 alignment(operands.bias) if operands.bias else MAX_ALIGNMENT), workspace_bytes)
    plan = plans.find(key)
    if plan is None:
        trial = None
        if make_timer is not None and not capturing:  # capturing: ``make`` refuses, and needs no timer
            trial = Trial(make_timer(), operands, workspace, workspace_bytes, stream)
        plan = plans.make(key, handle, operands.bias, capturing, trial)
    if plan.algo is None:
        return False
    if epilogue & EPILOGUE_BIAS:
        plan.set_bias(operands.bias)
    c = operands.c
    lib.matmul(handle, plan.desc, operands.alpha, operands.a, plan.a, operands.b, plan.b, operands.beta, c, plan.c, c,
               plan.c, ctypes.addressof(plan.algo), workspace, workspace_bytes, stream)
    return True


def describe(key: LtKey) -> str:
    call = key.call
    batch = f"{call.batch} x " if call.batch > 1 else ""
    return (f"a {batch}{call.m}x{call.n}x{call.k} {np.dtype(key.dtype).name} GEMM (column-major m x n x k) with "
            f"epilogue {EPILOGUE_NAMES.get(key.epilogue, key.epilogue)}")




def gemm_plans() -> list[dict[str, Any]]:
    """Every key whose cuBLASLt algorithm was chosen in this process, and whether it runs fused."""
    with _choices_lock:
        items = list(_choices.items())
    return [{"device": key.device, "dtype": np.dtype(key.dtype).name, "m": key.call.m, "n": key.call.n, "k": key.call.k,
             "batch": key.call.batch, "trans_a": key.call.trans_a, "trans_b": key.call.trans_b,
             "epilogue": EPILOGUE_NAMES.get(key.epilogue, str(key.epilogue)), "fused": choice.algo is not None,
             "reason": choice.reason, "proposals": choice.proposals, "chosen": choice.chosen,
             "microseconds": [round(s * 1e6, 3) for s in choice.seconds]} for key, choice in items]
