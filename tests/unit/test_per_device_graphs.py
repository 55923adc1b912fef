"""A jitted function used on a second device gets its own graphs, buffers and pool there.

The host backend has one device, so the routing is tested with a host backend that places arrays
on "devices" by address (what CuPy's ``array.data.device_id`` tells on a GPU).
"""

from __future__ import annotations

import numpy as np

import cupygraph as cg
from cupygraph.backends import HostBackend
from cupygraph.cache import CUDAGraphRegistry


class TwoDevices(HostBackend):
    """Host arrays placed on the device they were registered on, else on the current device
    (``current``, as CuPy allocates on ``cupy.cuda.Device()``)."""

    current = 0

    per_device = True

    def __init__(self, device: int = 0, placed: dict[int, int] | None = None):
        self.device_id = device
        self.placed = placed if placed is not None else {}

    def place(self, array: np.ndarray, device: int) -> np.ndarray:
        self.placed[array.__array_interface__["data"][0]] = device
        return array

    def device_of(self, array):
        return self.placed.get(array.__array_interface__["data"][0], TwoDevices.current)

    def on_device(self, device: int) -> TwoDevices:
        return TwoDevices(device, self.placed)


def jitted(fn, backend):
    config = cg.CUDAGraphConfig(backend="host", capture_sizes=[4, 8])
    return cg.GraphedFunction(fn, registry=CUDAGraphRegistry(config, backend))


def test_a_call_on_another_device_gets_its_own_family_there():
    backend = TwoDevices()
    f = jitted(lambda x: x * 2 + 1, backend)
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((3, 2))
    x1 = backend.place(rng.standard_normal((3, 2)), 1)
    for _ in range(3):  # the same shape on both devices: never the other device's graph
        np.testing.assert_array_equal(f(x0), x0 * 2 + 1)
        np.testing.assert_array_equal(f(x1), x1 * 2 + 1)
    families = f.devices()
    assert sorted(families) == [0, 1] and families[0] is f
    on_one = families[1]
    assert on_one.registry is not f.registry and on_one.backend.device_id == 1
    assert f.registry.num_graphs() == 1 and on_one.registry.num_graphs() == 1
    assert f.stats().hits == 2 and on_one.stats().hits == 2  # each device's replays on its own graph
    f.clear()
    assert on_one.registry.num_graphs() == 0


def test_warmup_with_arrays_on_another_device_captures_there():
    backend = TwoDevices()
    f = jitted(lambda x: x - 1, backend)
    x1 = backend.place(np.ones((4, 2)), 1)
    TwoDevices.current = 1  # as `with cupy.cuda.Device(1):` around the warm-up
    try:
        assert f.warmup(x1, progress=False) == 2
    finally:
        TwoDevices.current = 0
    assert f.registry.num_graphs() == 0 and f.devices()[1].registry.num_graphs() == 2


def test_a_call_mixing_devices_is_refused_naming_the_argument():
    backend = TwoDevices()
    f = jitted(lambda x, y: x + y, backend)
    x1 = backend.place(np.ones((2, 2)), 1)
    try:
        f(x1, np.ones((2, 2)))
    except cg.InputMismatchError as err:
        assert "argument 1" in str(err) and "device 0" in str(err)
    else:
        raise AssertionError("a call mixing devices was accepted")


def test_one_device_backends_never_route():
    f = cg.jit(lambda x: x + 1, config=dict(backend="host"))
    f(np.ones((2, 2)))
    assert list(f.devices()) == [-1]
