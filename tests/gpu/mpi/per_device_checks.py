"""One process, two GPUs, no collectives: a jitted function used on device 1 gets its own graphs there."""

from __future__ import annotations

import cupy
import numpy as np

import cupygraph as cg


def main() -> None:
    f = cg.jit(lambda x: cupy.sin(x) * 2 + x, config=dict(capture_sizes=[8, 16]))
    for call in range(3):
        for device in (0, 1):
            with cupy.cuda.Device(device):
                host = np.random.default_rng(10 * call + device).standard_normal((12, 32)).astype(np.float32)
                x = cupy.asarray(host)
                got = f(x)
                want = cupy.sin(x) * 2 + x
                assert got.device.id == device, (got.device.id, device)
                assert bool((got == want).all()), f"device {device} call {call}: replay differs from eager"
    families = f.devices()
    assert sorted(families) == [0, 1] and families[1].backend.device_id == 1
    assert [fam.registry.num_graphs() for fam in families.values()] == [1, 1]
    assert families[0].stats().hits == 2 and families[1].stats().hits == 2
    print("PASS per-device graphs in one process", {d: fam.stats().to_dict()["hits"] for d, fam in families.items()})


if __name__ == "__main__":
    main()
