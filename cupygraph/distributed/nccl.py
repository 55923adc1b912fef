"""``NcclCommunicator``: the collectives on CuPy arrays through NCCL (``cupy.cuda.nccl``).

Every operation is enqueued on the caller's current stream, so it orders with surrounding CuPy
work and, under stream capture, is recorded into the graph (NCCL 2.9+ supports capture). Two rules
come from NCCL, not from cupygraph: capturing a collective is itself collective (every rank must
capture, and later launch, the graph made from the same capture — ``LockstepFunction`` ensures
it), and one GPU per process (several GPUs per process under capture can deadlock).

A graph that records a collective holds this communicator (``holding.hold``), as a graph holds
a cuBLAS workspace: NCCL keeps the buffers' addresses in its own plan (and, for captured calls,
may register them with the peer GPUs), where re-pointing the graph's kernel nodes cannot reach
them. So such a graph never binds the caller's arrays (zero-copy reason ``library_state``), and
the communicator lives as long as the graphs that use it.

The host side (``agree_max``, ``barrier``, the unique id at start-up) goes over MPI: MPI calls are
never captured, and the per-call agreement is a few microseconds on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.holding import hold
from .comm import Communicator, DistributedError
from .mpi_host import MpiCommunicator

__all__ = ["NcclCommunicator"]


class NcclCommunicator(Communicator):
    """One rank's NCCL communicator on ``device``; ``host`` (MPI) carries the host agreement.

    Made by ``cupygraph.distributed.init()``: rank 0 creates the NCCL unique id, MPI broadcasts it,
    every rank joins on its own GPU. Contract: arrays must live on ``device``; ``destroy()`` (or
    the end of the process) frees the communicator.
    """

    backend_name = "cupy"

    def __init__(self, host: MpiCommunicator, device: int):
        import cupy
        from cupy.cuda import nccl

        self._cupy, self._nccl = cupy, nccl
        self.host = host
        self.rank, self.size, self.device = host.rank, host.size, int(device)
        uid = nccl.get_unique_id() if self.rank == 0 else None
        uid = host.comm.bcast(uid, root=0)
        with cupy.cuda.Device(self.device):
            self.nccl = nccl.NcclCommunicator(self.size, uid, self.rank)
        self._dtypes = {
            "int8": nccl.NCCL_INT8, "uint8": nccl.NCCL_UINT8, "int32": nccl.NCCL_INT32,
            "uint32": nccl.NCCL_UINT32, "int64": nccl.NCCL_INT64, "uint64": nccl.NCCL_UINT64,
            "float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64,
        }
        self._ops = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}

    def destroy(self) -> None:
        """Free the NCCL communicator (collective: every rank calls it). Graphs that recorded its
        collectives must be cleared first: they hold the communicator and replay through it."""
        if self.nccl is not None:
            self.nccl.destroy()
            self.nccl = None

    def agree_max(self, values: Any) -> np.ndarray:
        return self.host.agree_max(values)

    def barrier(self) -> None:
        self.host.barrier()

    # -- device collectives ----------------------------------------------------------------------

    def _stream(self) -> int:
        return int(self._cupy.cuda.get_current_stream().ptr)

    def _dtype(self, array: Any) -> int:
        return int(self._dtypes[np.dtype(array.dtype).name])

    def _ready(self, method: str, **arrays: Any) -> None:
        """Before a collective: the communicator is alive and every named array is a CuPy array on its
        device; inside a capture (or its warm-ups) the recording then holds the communicator."""
        if self.nccl is None:
            raise DistributedError(f"{method}: this NCCL communicator was destroyed; make a new one with "
                                   "cupygraph.distributed.init()")
        for name, array in arrays.items():
            if not hasattr(getattr(array, "device", None), "id"):  # a NumPy array's device is "cpu"
                raise TypeError(f"{method}: {name} must be a CuPy array for the NCCL communicator, got "
                                f"{type(array).__name__} (cupy.asarray(...) first, or use the MPI communicator for "
                                "NumPy arrays)")
            if array.device.id != self.device:
                raise ValueError(f"{method}: {name} is on device {array.device.id} but this rank's communicator "
                                 f"uses device {self.device}; one GPU per process")
        hold(self)  # the recording keeps the communicator and binds nothing (library_state)

    def _empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        with self._cupy.cuda.Device(self.device):
            return self._cupy.empty(shape, dtype=like.dtype)

    def _all_reduce(self, x: Any, out: Any, op: str) -> None:
        self._ready("all_reduce", x=x, out=out)
        self.nccl.allReduce(x.data.ptr, out.data.ptr, x.size, self._dtype(x), self._ops[op], self._stream())

    def _all_gather(self, x: Any, out: Any) -> None:
        self._ready("all_gather", x=x, out=out)
        self.nccl.allGather(x.data.ptr, out.data.ptr, x.size, self._dtype(x), self._stream())

    def _reduce_scatter(self, x: Any, out: Any, op: str) -> None:
        self._ready("reduce_scatter", x=x, out=out)
        self.nccl.reduceScatter(x.data.ptr, out.data.ptr, out.size, self._dtype(x), self._ops[op], self._stream())

    def _broadcast(self, x: Any, root: int) -> None:
        self._ready("broadcast", x=x)
        self.nccl.broadcast(x.data.ptr, x.data.ptr, x.size, self._dtype(x), root, self._stream())

    def _send(self, x: Any, peer: int) -> None:
        self._ready("send", x=x)
        self.nccl.send(x.data.ptr, x.size, self._dtype(x), peer, self._stream())

    def _recv(self, out: Any, peer: int) -> None:
        self._ready("recv", out=out)
        self.nccl.recv(out.data.ptr, out.size, self._dtype(out), peer, self._stream())

    def _group_start(self) -> None:
        self._nccl.groupStart()

    def _group_end(self) -> None:
        self._nccl.groupEnd()
