"""Layer 9 (beside testing), distributed: collectives inside graphs, one process per GPU, and graphs
captured in lockstep on every rank.

* ``init()``: the communicator of this rank from the launcher (``mpirun``/``mpiexec`` + mpi4py):
  NCCL on CuPy arrays where every rank has a GPU, MPI on NumPy arrays on the host backend.
* ``Communicator``: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``send``,
  ``recv`` (``sendrecv``, ``group``) on the current stream, eager or inside captured graphs.
* ``jit(fn, comm=...)``: a ``LockstepFunction``, whose ranks agree on the batch, capture the
  same keys in the same order and fall back to eager together.

May import every layer below it (api, cache, backends, control_flow, ...); nothing imports it.
mpi4py, CuPy and NCCL are imported only when a communicator is made: ``import cupygraph`` (and
``import cupygraph.distributed``) never imports them.
"""

from __future__ import annotations

from .comm import REDUCE_OPS, CollectiveInConditional, Communicator, DistributedError
from .launch import init, local_rank, mpi_unavailable_reason
from .lockstep import LockstepFunction, LockstepRegistry, jit, lockstep_config
from .mpi_host import MpiCommunicator

__all__ = [
    "REDUCE_OPS", "CollectiveInConditional", "Communicator", "DistributedError", "LockstepFunction",
    "LockstepRegistry", "MpiCommunicator", "init", "jit", "local_rank", "lockstep_config", "mpi_unavailable_reason",
]
