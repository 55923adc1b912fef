"""The device memory the driver takes for one recording's executables, read around their making.

No CUDA API reports an executable's memory: the driver API has no ``cuGraphExecGetMemory`` (checked
against cuda-bindings 13.5's ``driver`` module), and ``cuDeviceGetGraphMemAttribute`` counts only the
memory of allocation nodes, which cupygraph's captures do not make (their memory comes from the
family's pool, outside the graph). What is left is the device's free memory (``cudaMemGetInfo``) before
and after each step that makes or uploads an executable, less what the family's pool asked the device
for in the same step (``DeviceBlocks.nbytes``, exact): the capture run (CuPy's ``end_capture``
instantiates there; ``cudaMemGetInfo`` is never called while a stream captures), PDL's
re-instantiation, and the upload.

What the number holds besides the executables: the driver's own rounding of the pool's allocations
made during the capture run (none after a warm-up, whose freed blocks the capture reuses), the modules
of kernels first loaded by the capture run (none after a warm-up), and anything another thread or
process took in the same window (the reading is device-wide). A window whose free memory grew counts
0. Executables made later for zero-copy calls (``executables_made`` in the statistics) are further
instantiations of about the same size, not counted here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

import cupy

from .pool import DeviceBlocks

SOURCE = ("cudaMemGetInfo: the device's free memory before and after the capture run (instantiation), PDL's "
          "re-instantiation and the upload, less what the pool took meanwhile")


class ExecutableMemory:
    """Sums, over the windows it is asked to read, the device memory the driver took beyond the pool's."""

    def __init__(self, blocks: DeviceBlocks):
        self._blocks = blocks
        self.nbytes: Optional[int] = 0
        """None once a reading failed: then nothing is claimed (``source`` says why)."""
        self.source = SOURCE

    @contextmanager
    def window(self) -> Iterator[None]:
        """Read the current device's free memory around the block (which must not start or end inside a
        stream capture); a block that raises is not counted."""
        free, pool = self._free(), self._blocks.nbytes
        yield
        after = self._free()
        if free is not None and after is not None and self.nbytes is not None:
            self.nbytes += max(0, free - after - (self._blocks.nbytes - pool))

    def _free(self) -> Optional[int]:
        if self.nbytes is None:
            return None
        try:
            return int(cupy.cuda.runtime.memGetInfo()[0])
        except Exception as err:  # a reading is never worth failing a capture for
            self.nbytes = None
            self.source = f"not measured: cudaMemGetInfo failed ({err})"
            return None
