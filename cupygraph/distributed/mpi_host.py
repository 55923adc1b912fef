"""``MpiCommunicator``: the collectives on NumPy arrays over MPI (mpi4py), for the host backend.

The reference for machines without a GPU (CPU CI runs it under ``mpiexec -n 2`` over loopback):
the same methods, checks and refusals as the NCCL communicator, so the lockstep logic above them
is tested for real. mpi4py is imported when a communicator is made, never by ``import cupygraph``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.guards.host_capturable import handed_back, plain_array
from ..backends.guards.host_refusal import capture_run_active
from .comm import Communicator

__all__ = ["MpiCommunicator"]


class MpiCommunicator(Communicator):
    """One rank of an MPI job; device collectives and host agreement both go over ``mpi_comm``.

    Inside a host capture run the device collectives move nothing, as on the GPU, where a capture
    records them without running them (they compute as if this rank were alone): the host
    backend's replay re-runs the function, and that run communicates. So a rank whose capture
    fails part-way cannot leave another rank waiting.

    Point-to-point transfers are non-blocking (``Isend``/``Irecv``) and completed at the end of
    the call, or at the end of ``group()`` when inside one, so a two-way exchange cannot deadlock.
    """

    backend_name = "host"
    device = -1

    def __init__(self, mpi_comm: Any = None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = mpi_comm if mpi_comm is not None else MPI.COMM_WORLD
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())
        self._ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        self._pending: list[Any] = []
        self._group_depth = 0

    def agree_max(self, values: Any) -> np.ndarray:
        local = np.ascontiguousarray(values, dtype=np.int64)
        out = np.empty_like(local)
        self.comm.Allreduce(local, out, op=self._mpi.MAX)
        return out

    def barrier(self) -> None:
        self.comm.Barrier()

    def _empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        # Under a host capture the result refuses host reads like every other array there.
        out = np.empty(shape, dtype=like.dtype)
        return handed_back(out)

    def _all_reduce(self, x: Any, out: Any, op: str) -> None:
        if capture_run_active():
            plain_array(out)[...] = plain_array(x)  # as if alone: the capture's numbers are never returned
            return
        send, recv = plain_array(x), plain_array(out)
        # In place (out=x) as NCCL allows it; MPI wants IN_PLACE instead of aliased buffers.
        same = send.__array_interface__["data"][0] == recv.__array_interface__["data"][0]
        self.comm.Allreduce(self._mpi.IN_PLACE if same else send, recv, op=self._ops[op])

    def _all_gather(self, x: Any, out: Any) -> None:
        if capture_run_active():
            plain_array(out).reshape(self.size, -1)[...] = plain_array(x).reshape(1, -1)
            return
        self.comm.Allgather(plain_array(x), plain_array(out))

    def _reduce_scatter(self, x: Any, out: Any, op: str) -> None:
        if capture_run_active():
            plain_array(out).reshape(-1)[...] = plain_array(x).reshape(self.size, -1)[self.rank]
            return
        self.comm.Reduce_scatter_block(plain_array(x), plain_array(out), op=self._ops[op])

    def _broadcast(self, x: Any, root: int) -> None:
        if capture_run_active():
            return
        self.comm.Bcast(plain_array(x), root=root)

    def _send(self, x: Any, peer: int) -> None:
        if capture_run_active():
            return
        self._pending.append(self.comm.Isend(plain_array(x), dest=peer))
        self._complete_unless_grouped()

    def _recv(self, out: Any, peer: int) -> None:
        if capture_run_active():
            return
        self._pending.append(self.comm.Irecv(plain_array(out), source=peer))
        self._complete_unless_grouped()

    def _group_start(self) -> None:
        self._group_depth += 1

    def _group_end(self) -> None:
        self._group_depth -= 1
        self._complete_unless_grouped()

    def _complete_unless_grouped(self) -> None:
        if self._group_depth == 0 and self._pending:
            pending, self._pending = self._pending, []
            self._mpi.Request.Waitall(pending)
