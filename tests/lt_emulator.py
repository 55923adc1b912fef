"""An emulated cuBLASLt on host memory, for testing cupygraph's cuBLASLt route without a GPU.

``FakeLt`` implements the binding interface of ``cupygraph/linalg/_lt_binding.py`` (``LtBinding``):
its descriptors keep the attributes set on them, its heuristic proposes ``proposals`` algorithms (one
by default) that remember the alignments they were asked for, and ``matmul`` computes what
``cublasLtMatmul`` computes on the very memory the call names, column-major as cuBLASLt reads it:
``D = epilogue(alpha op(A) op(B) + beta C)`` per matrix of a strided batch, the bias added per row
of D. It checks what cuBLASLt would refuse (leading dimensions, shapes, batch counts, attribute
sizes, addresses less aligned than the algorithm assumed). ``c_library`` exposes it as a C library
of ctypes callbacks with cublasLt.h's signatures, for the ctypes binding; ``lt_product`` runs one
fused product the way ``_gemm_cupy.product`` does; ``CostTimer`` times proposals without a clock.
"""

from __future__ import annotations

import ctypes
import itertools
import types
from typing import Any, Optional

import numpy as np

from cupygraph.linalg import _lt_binding, _lt_plans
from cupygraph.linalg._library import CublasError
from cupygraph.linalg._shapes import matmul_shapes, resolve, scale_dtype

DTYPES = {0: np.float32, 1: np.float64, 2: np.float16}  # cudaDataType_t
COMPUTE = {np.float32: 68, np.float64: 70, np.float16: 68}  # CUBLAS_COMPUTE_32F / _64F
# Attribute value types, by attribute id (cublasLt.h; nvmath-python's attribute-size tables).
DESC_TYPES = {2: ctypes.c_int32, 3: ctypes.c_int32, 4: ctypes.c_int32, 7: ctypes.c_uint32, 8: ctypes.c_void_p}
LAYOUT_TYPES = {5: ctypes.c_int32, 6: ctypes.c_int64}
PREF_TYPES = {1: ctypes.c_uint64, 5: ctypes.c_uint32, 6: ctypes.c_uint32, 7: ctypes.c_uint32, 8: ctypes.c_uint32}
INVALID_VALUE = 7


def _alignment(address: int) -> int:
    return min(256, address & -address) if address else 256


def _matrices(address: int, dtype: Any, rows: int, cols: int, ld: int, batch: int, stride: int) -> np.ndarray:
    """The (batch, rows, cols) column-major matrices at ``address``, as a writeable view."""
    item = np.dtype(dtype).itemsize
    extent = (batch - 1) * stride + (cols - 1) * ld + rows
    flat = np.frombuffer((ctypes.c_char * (extent * item)).from_address(address), dtype=dtype, count=extent)
    return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * item, item, ld * item))


def _activate(r: np.ndarray, epilogue: int) -> np.ndarray:
    if epilogue & _lt_binding.EPILOGUE_RELU:
        r = np.where(r > 0, r, 0)
    if epilogue & _lt_binding.EPILOGUE_GELU:
        r = 0.5 * r * (1 + np.tanh(0.7978845608028654 * (r + 0.044715 * r**3)))
    return r


class FakeLt:
    """cuBLASLt's semantics in NumPy, behind the ``LtBinding`` interface."""

    name = "fake"
    library_path = "(emulated cuBLASLt)"

    def __init__(self, unsupported: frozenset[int] | set[int] = frozenset(), heuristic_status: int = 0,
                 matmul_status: int = 0, proposals: int = 1, failing: frozenset[int] | set[int] = frozenset()):
        self.objects: dict[int, dict[str, Any]] = {}
        self.algos: dict[int, dict[int, int]] = {}
        self.calls: list[dict[str, Any]] = []
        self.unsupported, self.heuristic_status, self.matmul_status = set(unsupported), heuristic_status, matmul_status
        self.heuristic_calls = self.matmuls = 0
        # ``failing``: positions in the heuristic's order whose matmul returns NOT_SUPPORTED
        self.proposals, self.failing = proposals, set(failing)
        self.rank: dict[int, int] = {}  # algorithm id -> its position in the heuristic's answer
        self._ids = itertools.count(0x1000, 0x10)

    def _new(self, kind: str, **fields: Any) -> int:
        ident = next(self._ids)
        self.objects[ident] = {"kind": kind, "attrs": {}, **fields}
        return ident

    def _get(self, ident: int, kind: str) -> dict[str, Any]:
        found = self.objects.get(ident)
        if found is None or found["kind"] != kind:
            raise CublasError(f"(emulated) no live {kind} 0x{ident:x}", INVALID_VALUE)
        return found

    def _drop(self, ident: int, kind: str) -> None:
        self._get(ident, kind)
        del self.objects[ident]

    def _put(self, ident: int, kind: str, types_: dict[int, Any], attr: int, value: Any) -> None:
        expected = types_.get(attr)
        if expected is None or ctypes.sizeof(value) != ctypes.sizeof(expected):
            raise CublasError(f"(emulated) {kind} attribute {attr} of {ctypes.sizeof(value)} bytes", INVALID_VALUE)
        self._get(ident, kind)["attrs"][attr] = value.value or 0

    def create(self) -> int:
        return self._new("handle")

    def destroy(self, handle: int) -> None:
        self._drop(handle, "handle")

    def version(self) -> int:
        return 130100

    def desc_create(self, compute_type: int, scale_type: int) -> int:
        return self._new("desc", compute=compute_type, scale=scale_type)

    def desc_destroy(self, desc: int) -> None:
        self._drop(desc, "desc")

    def desc_set(self, desc: int, attr: int, value: Any) -> None:
        self._put(desc, "desc", DESC_TYPES, attr, value)

    def layout_create(self, data_type: int, rows: int, cols: int, ld: int) -> int:
        if ld < max(1, rows):
            raise CublasError(f"(emulated) layout ld {ld} < rows {rows}", INVALID_VALUE)
        return self._new("layout", type=data_type, rows=rows, cols=cols, ld=ld)

    def layout_destroy(self, layout: int) -> None:
        self._drop(layout, "layout")

    def layout_set(self, layout: int, attr: int, value: Any) -> None:
        self._put(layout, "layout", LAYOUT_TYPES, attr, value)

    def pref_create(self) -> int:
        return self._new("pref")

    def pref_destroy(self, pref: int) -> None:
        self._drop(pref, "pref")

    def pref_set(self, pref: int, attr: int, value: Any) -> None:
        self._put(pref, "pref", PREF_TYPES, attr, value)

    def heuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int,
                  requested: int) -> list[Any]:
        self.heuristic_calls += 1
        self._get(handle, "handle")
        for layout in (a, b, c, d):
            self._get(layout, "layout")
        if self.heuristic_status:
            raise CublasError("cublasLtMatmulAlgoGetHeuristic", self.heuristic_status)
        op = self._get(desc, "desc")
        if op["attrs"].get(7, 1) in self.unsupported:
            return []
        algos = []
        for position in range(min(requested, self.proposals)):
            algo = _lt_binding.Algo()
            algo.data[0] = ident = next(self._ids)
            self.algos[ident] = dict(self._get(pref, "pref")["attrs"])
            self.rank[ident] = position
            algos.append(algo)
        return algos

    def matmul(self, handle: int, desc: int, alpha: int, a: int, a_layout: int, b: int, b_layout: int, beta: int,
               c: int, c_layout: int, d: int, d_layout: int, algo: int, workspace: int, workspace_bytes: int,
               stream: int) -> None:
        if self.matmul_status:
            raise CublasError("cublasLtMatmul", self.matmul_status)
        self._get(handle, "handle")
        attrs = self._get(desc, "desc")["attrs"]
        op = self._get(desc, "desc")
        la, lb, lc, ld = (self._get(x, "layout") for x in (a_layout, b_layout, c_layout, d_layout))
        ident = _lt_binding.Algo.from_address(algo).data[0]
        chosen = self.algos[ident]
        if self.rank[ident] in self.failing:
            raise CublasError("(emulated) cublasLtMatmul", 15)
        for name, address, pref in (("A", a, 5), ("B", b, 6), ("C", c, 7), ("D", d, 8)):
            if _alignment(address) < chosen.get(pref, 256):
                raise CublasError(f"(emulated) {name} is {_alignment(address)}-byte aligned, the algorithm assumed "
                                  f"{chosen.get(pref, 256)}", INVALID_VALUE)
        if not workspace or workspace_bytes != chosen.get(1, 0):
            raise CublasError("(emulated) workspace other than the heuristic's", INVALID_VALUE)
        dtype = DTYPES[la["type"]]
        batches = {layout["attrs"].get(5, 1) for layout in (la, lb, lc, ld)}
        if len({layout["type"] for layout in (la, lb, lc, ld)}) != 1 or len(batches) != 1:
            raise CublasError("(emulated) mixed types or batch counts", INVALID_VALUE)
        if op["compute"] != COMPUTE[dtype] or DTYPES[op["scale"]] != scale_dtype(dtype):
            raise CublasError("(emulated) compute or scale type", INVALID_VALUE)
        batch = batches.pop()

        def matrices(address: int, layout: dict[str, Any]) -> np.ndarray:
            return _matrices(address, dtype, layout["rows"], layout["cols"], layout["ld"], batch,
                             layout["attrs"].get(6, 0))

        op_a, op_b = matrices(a, la), matrices(b, lb)
        op_a = op_a.transpose(0, 2, 1) if attrs.get(3, 0) else op_a
        op_b = op_b.transpose(0, 2, 1) if attrs.get(4, 0) else op_b
        if op_a.shape[2] != op_b.shape[1] or (ld["rows"], ld["cols"]) != (op_a.shape[1], op_b.shape[2]):
            raise CublasError("(emulated) shapes do not chain", INVALID_VALUE)
        if attrs.get(2, 0) != 0:
            raise CublasError("(emulated) only host pointer mode here", INVALID_VALUE)
        scale = scale_dtype(dtype)
        alpha_v, beta_v = (np.frombuffer(ctypes.string_at(p, scale.itemsize), scale)[0] for p in (alpha, beta))
        result = alpha_v * (op_a.astype(scale) @ op_b.astype(scale))
        if beta_v != 0:
            result = result + beta_v * matrices(c, lc).astype(scale)
        epilogue = attrs.get(7, 1)
        if epilogue & _lt_binding.EPILOGUE_BIAS:  # one value per row of D, the same for every matrix
            if not attrs.get(8):
                raise CublasError("(emulated) bias epilogue without a bias pointer", INVALID_VALUE)
            result = result + _matrices(attrs[8], dtype, ld["rows"], 1, ld["rows"], 1, 0)[0].astype(scale)
        matrices(d, ld)[...] = _activate(result, epilogue).astype(dtype)
        self.matmuls += 1
        self.calls.append({"algo": _lt_binding.Algo.from_address(algo).data[0], "epilogue": epilogue})


def c_library(fake: FakeLt) -> Any:
    """``fake`` as a C library: one ctypes callback per symbol of ``_lt_binding.CUBLASLT``."""

    def status(fn: Any) -> Any:
        def call(*args: Any) -> int:
            try:
                fn(*(0 if arg is None else arg for arg in args))
            except CublasError as err:
                return err.status
            except Exception as err:  # surfaces as a failed status, with the cause kept
                fake.calls.append({"error": err})
                return 14
            return 0
        return call

    def made(method: Any) -> Any:
        def create(out: int, *args: Any) -> None:
            ctypes.c_void_p.from_address(out).value = method(*args)
        return status(create)

    def setter(method: Any, types_: dict[int, Any]) -> Any:
        def put(target: int, attr: int, buf: int, size: int) -> None:
            expected = types_.get(attr)
            if expected is None or ctypes.sizeof(expected) != size:
                raise CublasError("(emulated) attribute size", INVALID_VALUE)
            method(target, attr, expected.from_buffer_copy(ctypes.string_at(buf, size)))
        return status(put)

    def heuristic(handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int, requested: int, results: int,
                  count: int) -> None:
        algos = fake.heuristic(handle, desc, a, b, c, d, pref, requested)
        ctypes.c_int.from_address(count).value = len(algos)
        for i, algo in enumerate(algos):
            result = _lt_binding.HeuristicResult()
            result.algo = algo
            size = ctypes.sizeof(result)
            ctypes.memmove(results + i * size, ctypes.addressof(result), size)

    impl = {
        "cublasLtCreate": made(fake.create), "cublasLtDestroy": status(fake.destroy),
        "cublasLtGetVersion": fake.version,
        "cublasLtMatmulDescCreate": made(fake.desc_create), "cublasLtMatmulDescDestroy": status(fake.desc_destroy),
        "cublasLtMatmulDescSetAttribute": setter(fake.desc_set, DESC_TYPES),
        "cublasLtMatrixLayoutCreate": made(fake.layout_create),
        "cublasLtMatrixLayoutDestroy": status(fake.layout_destroy),
        "cublasLtMatrixLayoutSetAttribute": setter(fake.layout_set, LAYOUT_TYPES),
        "cublasLtMatmulPreferenceCreate": made(fake.pref_create),
        "cublasLtMatmulPreferenceDestroy": status(fake.pref_destroy),
        "cublasLtMatmulPreferenceSetAttribute": setter(fake.pref_set, PREF_TYPES),
        "cublasLtMatmulAlgoGetHeuristic": status(heuristic), "cublasLtMatmul": status(fake.matmul),
    }
    lib = types.SimpleNamespace()
    for symbol, (restype, argtypes) in _lt_binding.CUBLASLT.signatures().items():
        setattr(lib, symbol, ctypes.CFUNCTYPE(restype, *argtypes)(impl[symbol]))
    return lib


_WORKSPACE = np.zeros(1 << 16, np.uint8)


def lt_product(lib: Any, plans: Any, handle: int, a: np.ndarray, b: np.ndarray, out: np.ndarray,
               bias: Optional[np.ndarray], activation: Optional[str], alpha: float = 1.0, beta: float = 0.0,
               capturing: bool = False, timer: Any = None, make_timer: Any = None) -> tuple[bool, Any]:
    """``out = activation(alpha a @ b + beta out + bias)`` through cupygraph's cuBLASLt planning on ``lib``,
    laid out as ``_gemm_cupy.product`` lays a fused product out; (whether it ran fused, the GemmCall).
    ``timer``: the timer a new plan times with; ``make_timer``: what makes it (``timer`` given: returns it)."""
    batch, m, k, n = matmul_shapes(a.shape, b.shape, "lt_product")

    def temporary() -> np.ndarray:
        target = np.empty((*batch, m, n), out.dtype)
        if beta != 0:
            target[...] = out
        return target

    call, pa, pb, target = resolve(a, b, out, batch, m, k, n, np, temporary, features_first=True)
    first, second = (pa, pb) if call.first == "a" else (pb, pa)
    scale = scale_dtype(out.dtype)
    alpha_v, beta_v = np.array(alpha, scale), np.array(beta, scale)
    operands = _lt_plans.Operands(first.ctypes.data, second.ctypes.data, target.ctypes.data,
                                  0 if bias is None else bias.ctypes.data, alpha_v.ctypes.data, beta_v.ctypes.data)
    fused = _lt_plans.execute(lib, handle, plans, 0, call, out.dtype.char, _lt_plans.EPILOGUES[(bias is not None,
                              activation)], 0, operands, _WORKSPACE.ctypes.data, _WORKSPACE.nbytes, 0, capturing,
                              make_timer if timer is None else lambda: timer)
    if fused and target is not out:
        out[...] = target
    return fused, call


def reference(a: np.ndarray, b: np.ndarray, bias: Optional[np.ndarray], activation: Optional[str],
              alpha: float = 1.0, beta: float = 0.0, c: Optional[np.ndarray] = None) -> np.ndarray:
    """The fused product in float64, straight from its definition."""
    r = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if c is not None and beta != 0:
        r = r + beta * c.astype(np.float64)
    if bias is not None:
        r = r + bias.astype(np.float64)
    if activation == "relu":
        return np.where(r > 0, r, 0)
    if activation == "gelu":
        return 0.5 * r * (1 + np.tanh(np.sqrt(2 / np.pi) * (r + 0.044715 * r**3)))
    return r


class CostTimer:
    """``_lt_tuning.Timer`` for a ``FakeLt``: each run costs what ``costs`` gives its algorithm's position
    in the heuristic's answer (deterministic, no clock); scratch is host memory kept by the timer."""

    def __init__(self, fake: FakeLt, costs: dict[int, float]):
        self.fake, self.costs = fake, costs
        self.scratches: list[np.ndarray] = []
        self.timed: list[int] = []  # positions, in the order they were timed

    def scratch(self, nbytes: int) -> int:
        padded = np.full(max(1, nbytes) + 256, 0x11, np.uint8)
        start = -padded.ctypes.data % 256  # 256-byte aligned, as device memory from CuPy's pool is
        self.scratches.append(padded[start:start + max(1, nbytes)])
        return int(self.scratches[-1].ctypes.data)

    def seconds(self, run: Any, repeats: int) -> float:
        for _ in range(repeats):
            run(0)
        position = self.fake.rank[self.fake.calls[-1]["algo"]]
        self.timed.append(position)
        return self.costs[position]
