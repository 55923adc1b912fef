"""``init``: a communicator from the launcher that started this process (mpirun/mpiexec + mpi4py).

One process per GPU: each rank takes the GPU of its rank on its node (``local_rank`` modulo the
node's GPUs) and makes it current, so everything it allocates afterwards lives there. The same
path runs on several nodes: MPI starts the ranks and carries the NCCL unique id; NCCL then finds
its own transport (NVLink, PCIe, InfiniBand or TCP sockets) between the GPUs.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..backends import gpu_unavailable_reason
from .comm import Communicator, DistributedError
from .mpi_host import MpiCommunicator

__all__ = ["init", "local_rank", "mpi_unavailable_reason"]


def mpi_unavailable_reason() -> Optional[str]:
    """None when mpi4py can start MPI here; otherwise why not, in words."""
    try:
        from mpi4py import MPI
    except Exception as err:  # ImportError, or an MPI library mpi4py cannot load
        return f"mpi4py is not importable ({type(err).__name__}: {err}); pip install mpi4py mpich"
    try:
        MPI.COMM_WORLD.Get_size()
    except Exception as err:
        return f"MPI does not start ({type(err).__name__}: {err})"
    return None


def _ranks_the_launcher_started() -> int:
    """The job size the launcher gave this process (MPICH/Hydra and srun: PMI_SIZE; Open MPI), or 0."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def local_rank(mpi_comm: Any) -> int:
    """This rank's index among the ranks on its node (shared-memory split of ``mpi_comm``)."""
    from mpi4py import MPI

    node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(node.Get_rank())
    finally:
        node.Free()


def init(mpi_comm: Any = None, *, backend: str = "auto", device: Optional[int] = None) -> Communicator:
    """The communicator of this rank: NCCL on CuPy arrays where a GPU is usable (``backend="cupy"``
    or ``"auto"``), else MPI on NumPy arrays (``"host"``). Collective: every rank calls it.

    ``mpi_comm`` (default ``MPI.COMM_WORLD``) chooses the ranks; ``device`` (default: the local
    rank modulo the node's GPUs) the GPU this rank uses, made current here.
    """
    if backend not in ("auto", "cupy", "host"):
        raise ValueError(f"unknown backend {backend!r}; valid backends: auto, cupy, host")
    why = mpi_unavailable_reason()
    if why is not None:
        raise DistributedError(f"cupygraph.distributed.init needs MPI: {why}")
    host = MpiCommunicator(mpi_comm)
    launched = _ranks_the_launcher_started()
    if mpi_comm is None and host.size == 1 and launched > 1:
        from mpi4py import MPI

        raise DistributedError(
            f"the launcher started {launched} ranks but MPI sees 1 here: mpi4py loaded another MPI "
            f"({MPI.Get_library_version().splitlines()[0].strip()}) than the launcher's, so every rank runs alone; "
            "use the mpiexec of mpi4py's MPI, or point MPI4PY_LIBMPI at the launcher's libmpi"
        )
    gpu_missing = gpu_unavailable_reason() if backend != "host" else "backend='host' was chosen"
    # Agreed before NCCL starts: a rank that went its own way would leave the others waiting.
    every_rank_has_a_gpu = host.agree_all(gpu_missing is None)
    if backend == "host" or (backend == "auto" and not every_rank_has_a_gpu):
        return host
    if not every_rank_has_a_gpu:
        raise DistributedError(f"backend='cupy' was asked for but not every rank can use a GPU "
                               f"(this rank: {gpu_missing or 'fine'}); use backend='host'")
    import cupy

    if device is None:
        device = local_rank(host.comm) % cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(device).use()
    from .nccl import NcclCommunicator

    return NcclCommunicator(host, device)
