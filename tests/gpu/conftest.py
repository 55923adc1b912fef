"""Fixtures the GPU tests share."""

from __future__ import annotations

from typing import Any

import pytest
from extras import needs_nvmath


@pytest.fixture
def on_device0() -> Any:
    """Device 0, made current for the test (the lent machines may have several GPUs): a module's tests take it
    with ``pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_device0")]``."""
    cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
    device = cupy.cuda.Device(0)
    device.use()
    return device


@pytest.fixture(scope="module")
def sm90_device() -> Any:
    """Device 0, made current; the module's tests skip below sm_90 (programmatic dependent launch needs it)."""
    cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")
    dev = cupy.cuda.Device(0)
    dev.use()
    if int(dev.compute_capability) < 90:
        pytest.skip(f"programmatic dependent launch needs sm_90+, this GPU is sm_{dev.compute_capability}")
    return dev


@pytest.fixture(params=["ctypes", "nvmath"])
def binding(request: Any, monkeypatch: Any) -> str:
    """The cuBLAS (and cuBLASLt) binding a test's new thread takes its handles from
    (``CUPYGRAPH_CUBLAS_BINDING``): each test runs under each installed one."""
    if request.param == "nvmath":
        needs_nvmath("the nvmath cuBLAS binding")
    monkeypatch.setenv("CUPYGRAPH_CUBLAS_BINDING", request.param)
    return str(request.param)
