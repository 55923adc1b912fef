"""The one binding mechanism of cuBLAS and cuBLASLt (``cupygraph/linalg/_library.py``), on stand-ins for
the C library and for nvmath's module: each table entry becomes the same method under either binding."""

from __future__ import annotations

import ctypes
import types

import pytest

from cupygraph.errors import BackendUnavailableError
from cupygraph.linalg._binding import Cublas
from cupygraph.linalg._library import STATUS, CtypesVia, CublasError, NvmathVia, calls
from cupygraph.linalg._lt_binding import DESC_EPILOGUE, CublasLt

HANDLE, VERSION = 0xBEEF, 130100


class FakeC:
    """A C library: each symbol records its call and returns ``status[symbol]`` (0 unless set); the
    create and version calls write their out-parameter."""

    def __init__(self, missing: frozenset[str] = frozenset()):
        self.calls: list[tuple[str, tuple]] = []
        self.status: dict[str, int] = {}
        self.missing = missing

    def __getattr__(self, symbol):
        if symbol.startswith("_") or symbol in self.missing:
            raise AttributeError(f"fake.so: undefined symbol: {symbol}")
        fake = self

        class Function:
            def __call__(self, *args):
                fake.calls.append((symbol, args))
                if symbol == "cublasCreate_v2":
                    ctypes.c_void_p.from_address(args[0]).value = HANDLE
                if symbol == "cublasGetVersion_v2":
                    ctypes.c_int.from_address(args[1]).value = VERSION
                return fake.status.get(symbol, 0)

        made = self.__dict__[symbol] = Function()
        return made


def test_the_ctypes_binding_runs_each_entry_with_its_prototype():
    lib = FakeC()
    cublas = Cublas(CtypesVia(lib, "fake.so"))
    assert (cublas.name, cublas.library_path) == ("ctypes", "fake.so")
    assert cublas.create() == HANDLE and cublas.version(HANDLE) == VERSION
    assert lib.calls[1][0] == "cublasGetVersion_v2" and lib.calls[1][1][0] == HANDLE
    assert lib.cublasGemmEx.argtypes == Cublas.gemm.argtypes and lib.cublasGemmEx.restype is STATUS
    assert cublas.set_stream(HANDLE, 7) is None and lib.calls[-1] == ("cublasSetStream_v2", (HANDLE, 7))
    cublas.routine("dgetrfBatched", HANDLE, 4, 0, 4, 0, 0, 2)
    assert lib.calls[-1] == ("cublasDgetrfBatched", (HANDLE, 4, 0, 4, 0, 0, 2))
    lib.status["cublasGemmEx"] = 13
    with pytest.raises(CublasError, match=r"cublasGemmEx failed with CUBLAS_STATUS_EXECUTION_FAILED \(13\)"):
        cublas.gemm(*range(19))


def test_a_symbol_missing_from_the_library_is_named():
    with pytest.raises(BackendUnavailableError, match=r"no cublasLtMatmul in fake\.so"):
        CublasLt(CtypesVia(FakeC(missing=frozenset({"cublasLtMatmul"})), "fake.so"))


def test_the_nvmath_binding_calls_each_entry_by_nvmaths_name():
    class NvmathError(Exception):
        status = 15

    made: list[tuple[str, tuple]] = []
    module = types.ModuleType("nvmath.bindings.cublasLt")

    def function(name, result=None):
        def call(*args):
            made.append((name, args))
            if name == "matmul":
                raise NvmathError("unsupported")
            return result
        return call

    for entry in calls(CublasLt):
        setattr(module, entry.nvmath, function(entry.nvmath, HANDLE if entry.made else VERSION))
    lt = CublasLt(NvmathVia(module, NvmathError, "libcublasLt (loaded by nvmath)"))
    assert lt.name == "nvmath" and lt.create() == HANDLE and lt.version() == VERSION
    value = ctypes.c_uint32(6)
    assert lt.desc_set(HANDLE, DESC_EPILOGUE[0], value) is None
    assert made[-1] == ("matmul_desc_set_attribute", (HANDLE, 7, ctypes.addressof(value), 4))
    with pytest.raises(CublasError, match=r"nvmath.bindings.cublasLt.matmul failed with CUBLAS_STATUS_NOT_SUPPORTED"):
        lt.matmul(*range(16))



def test_handles_of_both_libraries_are_counted_by_their_library(monkeypatch):
    import gc

    from lt_emulator import FakeLt

    from cupygraph.linalg import _binding, _cublas_handles, _lt_binding, _retire

    monkeypatch.setattr(_retire, "_retired", [])  # this test's handles are queued here, never destroyed
    base = _cublas_handles.resources()
    cublas, lt = Cublas(CtypesVia(FakeC(), "fake.so")), FakeLt()
    monkeypatch.setattr(_binding.CUBLAS, "binding", lambda: cublas)
    monkeypatch.setattr(_lt_binding.CUBLASLT, "binding", lambda: lt)
    handles = [_cublas_handles.Handle(0), _cublas_handles.Handle(0), _cublas_handles.LtHandle(0)]
    assert [h.ptr for h in handles[:2]] == [HANDLE, HANDLE] and handles[2].ptr in lt.objects
    counts = _cublas_handles.resources()
    assert (counts["handles"], counts["lt_handles"]) == (base["handles"] + 2, base["lt_handles"] + 1)
    handles.clear()
    gc.collect()
    # gone from the registry, queued for destruction under the same library names
    assert _cublas_handles.resources() == counts
    assert (_retire.pending(_binding.CUBLAS.name), _retire.pending(_lt_binding.CUBLASLT.name)) == (2, 1)
