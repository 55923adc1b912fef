"""One jitted function used on two GPUs (``api/devices.py``): a graph family per device, each call
routed by its array's device, every result equal to eager bit for bit on fresh random data, and each
family's steady calls served by its own compiled replay (``backends/fastpath/record.py``). Needs two GPUs."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from replay_helpers import poison_static_buffers  # noqa: E402

from cupygraph.backends.fastpath.record import COMPILED  # noqa: E402
from cupygraph.kernels import get_kernel  # noqa: E402


@pytest.fixture(autouse=True)
def _two_devices():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs: run on a 2-GPU machine (device kind nvidia-h100-x2)")
    cupy.cuda.Device(0).use()
    yield
    cupy.cuda.Device(0).use()


def one_kernel():
    affine = get_kernel("elementwise.cu", "affine")

    def f(x):
        x = cupy.ascontiguousarray(x)
        out = cupy.empty_like(x)
        n = x.size
        affine((min(1024, (n + 255) // 256),), (256,), (x, out, np.int64(n), np.float32(1.5), np.float32(0.25)))
        return out

    return f


def rand(rng, rows, device):
    with cupy.cuda.Device(device):
        return cupy.asarray(rng.standard_normal((rows, 64)).astype(np.float32))


def call_on(g, f, x, device):
    with cupy.cuda.Device(device):
        for family in g.devices().values():
            poison_static_buffers(family, cupy)
        got = g(x)
        assert got.data.device_id == device
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(f(x)))


def test_each_device_gets_its_own_family_and_compiled_replay():
    rng = np.random.default_rng(7)
    f = one_kernel()
    g = cg.jit(f, config=dict(backend="cupy", input_binding="auto", capture_sizes=[4, 8]))
    xs = {0: rand(rng, 8, 0), 1: rand(rng, 8, 1)}
    for _ in range(12):  # the two devices in turn, the arrays refilled in place
        for device in (0, 1):
            with cupy.cuda.Device(device):
                xs[device][...] = rand(rng, 8, device)
            call_on(g, f, xs[device], device)
    call_on(g, f, rand(rng, 5, 1), 1)  # padded, on device 1
    call_on(g, f, rand(rng, 8, 0), 0)  # a fresh array at another address
    families = g.devices()
    assert sorted(families) == [0, 1]
    for device, family in families.items():
        assert family.backend.device_id == device
        record = family.record
        if COMPILED:
            assert record is not None and record.served >= 8, (device, record)
