"""How many times each kind of call runs a jitted function's Python body: measured for the rows of
README.md's table ("What a call runs"), on either backend.

Shared by ``tests/unit/test_execution_counts.py`` (host) and ``tests/gpu/test_first_call_gpu.py``
(GPU), which compare it with ``repo_files.documented_runs``, so the table cannot drift.
"""

from __future__ import annotations

import warnings
from typing import Any

import cupygraph as cg


def measured_runs(xp: Any, backend: str, num_warmups: int) -> dict[str, int]:
    """Per README row, the runs of the function that kind of call made (``xp``: numpy or cupy)."""
    config = dict(backend=backend, capture_sizes=[4], num_warmups=num_warmups)
    runs = [0]

    def plain(x):
        runs[0] += 1
        return x + 1

    def reads_by_address(x, w):
        runs[0] += 1
        w += 1  # a constant argument, written in place
        return x * w

    def reads_the_data(x):
        runs[0] += 1
        return x * float(x.sum())  # a device-to-host read: refused at capture, the key runs eagerly

    def counted(call: Any, *args: Any) -> int:
        runs[0] = 0
        call(*args)
        return runs[0]

    padded, exact = xp.ones((3, 2)), xp.ones((4, 2))
    f = cg.jit(plain, config=config)
    captures = counted(f, padded)
    replay = counted(f, padded)
    writer = cg.jit(reads_by_address, config=config, constant_argnums=(1,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.ForeignMemoryWarning)
        writes = counted(writer, padded, xp.zeros(2))
    warmed = cg.jit(plain, config=config)
    warmup = counted(lambda x: warmed.warmup(x, sizes=[4], progress=False), exact)
    first_padded = {counted(warmed, padded)}
    at_exact = cg.jit(plain, config=config)
    at_exact(exact)
    first_padded.add(counted(at_exact, padded))
    assert len(first_padded) == 1, f"a key's first padded call ran {first_padded} times after warmup() / an exact call"
    eager = cg.jit(reads_the_data, config=config)
    eager(padded)  # the call whose capture fails
    fallback = counted(eager, padded)
    assert eager.stats().fallbacks_by_reason == {"device_to_host_read": 2}, eager.stats().to_dict()
    assert f.stats().hits == 1 and warmed.stats().hits == 0 and at_exact.stats().hits == 0
    return {
        "the call that captures its key": captures,
        "the same, where it wrote into an array the function reads by address": writes,
        "a key's first padded call, the key captured at its exact size or by `warmup()`": first_padded.pop(),
        "a replay": replay,
        "a call of a key that runs eagerly (a fallback)": fallback,
        "`warmup()`, per size": warmup,
    }
