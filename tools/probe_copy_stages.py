#!/usr/bin/env python3
"""Issue 28's open lead: where the input_binding="copy" call spends its GPU time, stage by stage.

A one-off probe for one decision (whether the family pool's block placement explains the copy-mode
miss in benchmarks/hot_path.md); it leaves once that is decided. On the GPU machine, after
`bash tools/gpu_session.sh` (wheels installed, extension built), alternating trees and alignments:

    for tree in .ab_old .; do PYTHONPATH=/tmp/site python3 tools/probe_copy_stages.py $PWD/$tree; done
    ALIGN=4096 PYTHONPATH=/tmp/site python3 tools/probe_copy_stages.py $PWD

The 100-kernel chain of 65536 floats under jit with input_binding="copy": GPU time per call (events
around 500 back-to-back calls of one stage alone, 7 rotated rounds, medians) of the whole call, the
input copy, the graph launch and the output copy; and where the static buffer and the output sit
(bytes past a 4 KiB and a 2 MiB boundary). ``ALIGN`` (this tree only) makes the family pool's blocks
start on that boundary, to test whether placement is the cause.
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
import sys
from typing import Any

import numpy as np


def _aligned_blocks(alignment: int) -> None:
    """The family pool's blocks start on ``alignment`` (over-allocated by as much)."""
    import cupy

    from cupygraph.backends.cupy import pool

    def allocate(self: Any, size: int) -> Any:
        memory = cupy.cuda.Memory(size + alignment)
        start = (memory.ptr + alignment - 1) // alignment * alignment
        self._blocks[start] = memory
        bisect.insort(self._starts, start)
        self.nbytes += size
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(start, size, memory), 0)

    pool.DeviceBlocks.allocate = allocate


def main() -> None:
    tree = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    sys.path.insert(0, tree)
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import cupy

    import cupygraph as cg
    from tools.bench_workloads import chain_fn
    from tools.bench_zero_copy import gpu_block

    alignment = int(os.environ.get("ALIGN", "0"))
    if alignment:
        _aligned_blocks(alignment)
    cupy.cuda.Device(0).use()
    x = cupy.asarray(np.random.default_rng(1).standard_normal((65536,)).astype(np.float32))
    graphed = cg.jit(chain_fn(100), config=dict(capture_sizes=[65536], input_binding="copy"))
    for _ in range(300):
        graphed(x)
    cupy.cuda.runtime.deviceSynchronize()
    (entry,) = list(graphed.registry.entries())
    recording = getattr(entry, "recording", None) or entry.cudagraph
    static = entry.static_inputs[0]
    output = recording.outputs[0] if isinstance(recording.outputs, (list, tuple)) else recording.outputs

    stages = {"call": lambda: graphed(x), "copy_in": lambda: entry.backend.copy_rows(static, x),
              "launch": recording.launch, "copy_out": lambda: entry.backend.copy_out(output)}
    names = list(stages)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(7):
        for name in names[round_ % 4:] + names[:round_ % 4]:
            times[name].append(gpu_block(stages[name], 500))
    print(json.dumps({"tree": tree, "align": alignment,
                      **{name: round(statistics.median(values), 3) for name, values in times.items()},
                      "static_past_4k": int(static.data.ptr) % 4096, "static_past_2m": int(static.data.ptr) % (2 << 20),
                      "output_past_4k": int(output.data.ptr) % 4096}))


if __name__ == "__main__":
    main()
