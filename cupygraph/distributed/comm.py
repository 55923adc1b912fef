"""``Communicator``: collectives and point-to-point transfers between the ranks of one job.

One process per GPU (or per CPU rank on the host backend). Every method is collective in the MPI
sense: each rank calls it, in the same order, with arrays of the same shape and dtype (the root's
or the peer's, for ``broadcast`` and ``send``/``recv``). The device methods work on the caller's
current stream, so they order with surrounding CuPy work and can be recorded into a graph; the
host methods (``agree_*``, ``barrier``) talk over MPI and must never run inside a capture.

What each method does to its arguments:
  * ``all_reduce(x, op, out=None)``: ``out`` (default: a new array like ``x``) = op over ranks of ``x``.
  * ``all_gather(x, out=None)``: rank r's ``x`` lands in rows ``r*len(x):(r+1)*len(x)`` of ``out``
    (default: a new array of ``size * len(x)`` rows).
  * ``reduce_scatter(x, op, out=None)``: op over ranks of ``x``, rank r keeps the r-th of
    ``size`` equal row blocks (``len(x)`` must divide by ``size``).
  * ``broadcast(x, root=0)``: the root's ``x`` is written into every rank's ``x`` (in place).
  * ``send(x, peer)`` / ``recv(out, peer)``: ``out`` on ``peer`` receives ``x``. Two ranks that
    exchange both ways put the pair in ``with comm.group():`` (or use ``sendrecv``), which issues
    them together instead of one after the other (NCCL's group semantics; MPI non-blocking).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np

from ..backends.guards.host_refusal import capture_run_active
from ..control_flow.loops import inside_conditional
from ..control_flow.nodes import capturing_stream
from ..errors import CaptureError, CupyGraphError
from ..reasons import FallbackReason

__all__ = ["REDUCE_OPS", "CollectiveInConditional", "Communicator", "DistributedError", "check_array",
           "refuse_in_conditional"]

REDUCE_OPS = ("sum", "prod", "max", "min")
"""Reductions every backend offers (NCCL's and MPI's common set)."""

SUPPORTED_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")


class DistributedError(CupyGraphError):
    """A distributed call that cannot go on: ranks that disagree, a missing launcher or library."""


class CollectiveInConditional(CaptureError):
    """A collective inside a ``while_loop``/``cond`` body under capture."""

    reason = FallbackReason.COLLECTIVE_IN_CONDITIONAL


def check_array(array: Any, what: str, method: str) -> None:
    """Clear errors for arrays a collective cannot send (not C-contiguous, an unsupported dtype)."""
    dtype = getattr(array, "dtype", None)
    if dtype is None or not hasattr(array, "shape"):
        raise TypeError(f"{method}: {what} must be an array, got {type(array).__name__}")
    if np.dtype(dtype).name not in SUPPORTED_DTYPES:
        raise TypeError(f"{method}: {what} has dtype {np.dtype(dtype).name}; collectives take "
                        f"{', '.join(SUPPORTED_DTYPES)}")
    flags = array.flags
    if not flags.c_contiguous:
        raise ValueError(f"{method}: {what} ({np.dtype(dtype).name}{list(array.shape)}) is not C-contiguous; "
                         "pass x.copy() or an ascontiguousarray")


def refuse_in_conditional(method: str) -> None:
    """Collectives cannot be recorded inside a CUDA conditional node (NVIDIA/nccl#1986): refuse them
    in a ``while_loop``/``cond``/``switch`` body under capture, on the host backend too (the reference refuses
    what the GPU refuses). Outside a capture the loop runs on the host and the call is fine."""
    if inside_conditional() and (capture_run_active() or capturing_stream() is not None):
        raise CollectiveInConditional(
            f"{FallbackReason.COLLECTIVE_IN_CONDITIONAL.text}: {method}() inside a while_loop/cond/switch body; NCCL "
            "cannot run in a CUDA conditional node. Move the collective out of the loop body (a host loop "
            "around the graphed step, as examples/distributed_cg.py does)"
        )


class Communicator(abc.ABC):
    """The ranks of one job and the collectives between them (see the module docstring)."""

    rank: int
    size: int
    backend_name: str
    """The cupygraph backend whose arrays the collectives take: ``"host"`` (NumPy) or ``"cupy"``."""
    device: int
    """The GPU this rank uses (-1 on the host)."""

    # -- device collectives: on the current stream, recordable into graphs ------------------------

    def all_reduce(self, x: Any, op: str = "sum", out: Optional[Any] = None) -> Any:
        check_array(x, "x", "all_reduce")
        out = self._out(x, out, tuple(x.shape), "all_reduce")
        self._all_reduce(x, out, self._op(op, "all_reduce"))
        return out

    def all_gather(self, x: Any, out: Optional[Any] = None) -> Any:
        check_array(x, "x", "all_gather")
        refuse_in_conditional("all_gather")
        shape = (self.size * (x.shape[0] if x.ndim else 1), *x.shape[1:])
        out = self._out(x, out, shape, "all_gather")
        self._all_gather(x, out)
        return out

    def reduce_scatter(self, x: Any, op: str = "sum", out: Optional[Any] = None) -> Any:
        check_array(x, "x", "reduce_scatter")
        rows = x.shape[0] if x.ndim else 0
        if rows % self.size:
            raise ValueError(f"reduce_scatter: x has {rows} rows, not a multiple of the {self.size} ranks; "
                             "pad it to a multiple")
        out = self._out(x, out, (rows // self.size, *x.shape[1:]), "reduce_scatter")
        self._reduce_scatter(x, out, self._op(op, "reduce_scatter"))
        return out

    def broadcast(self, x: Any, root: int = 0) -> Any:
        check_array(x, "x", "broadcast")
        self._peer(root, "broadcast", "root")
        refuse_in_conditional("broadcast")
        self._broadcast(x, root)
        return x

    def send(self, x: Any, peer: int) -> None:
        check_array(x, "x", "send")
        self._peer(peer, "send", "peer")
        refuse_in_conditional("send")
        self._send(x, peer)

    def recv(self, out: Any, peer: int) -> Any:
        check_array(out, "out", "recv")
        self._peer(peer, "recv", "peer")
        refuse_in_conditional("recv")
        self._recv(out, peer)
        return out

    def sendrecv(self, x: Any, send_to: int, out: Any, recv_from: int) -> Any:
        """Send ``x`` to ``send_to`` and receive ``out`` from ``recv_from`` together (no deadlock)."""
        with self.group():
            self.send(x, send_to)
            self.recv(out, recv_from)
        return out

    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """Issue the sends and receives inside together, when the block ends."""
        self._group_start()
        try:
            yield
        finally:
            self._group_end()

    # -- host agreement: MPI on the host, never inside a capture -----------------------------------

    @abc.abstractmethod
    def agree_max(self, values: Any) -> np.ndarray:
        """The element-wise maximum over ranks of a small int64 vector (one host collective)."""

    def agree_all(self, flag: bool) -> bool:
        """True when ``flag`` is true on every rank."""
        return bool(self.agree_max(np.array([0 if flag else 1], dtype=np.int64))[0] == 0)

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait until every rank got here."""

    # -- what a backend provides -----------------------------------------------------------------

    @abc.abstractmethod
    def _empty(self, like: Any, shape: tuple[int, ...]) -> Any: ...

    @abc.abstractmethod
    def _all_reduce(self, x: Any, out: Any, op: str) -> None: ...

    @abc.abstractmethod
    def _all_gather(self, x: Any, out: Any) -> None: ...

    @abc.abstractmethod
    def _reduce_scatter(self, x: Any, out: Any, op: str) -> None: ...

    @abc.abstractmethod
    def _broadcast(self, x: Any, root: int) -> None: ...

    @abc.abstractmethod
    def _send(self, x: Any, peer: int) -> None: ...

    @abc.abstractmethod
    def _recv(self, out: Any, peer: int) -> None: ...

    @abc.abstractmethod
    def _group_start(self) -> None: ...

    @abc.abstractmethod
    def _group_end(self) -> None: ...

    # -- argument checks shared by every backend ---------------------------------------------------

    def _op(self, op: str, method: str) -> str:
        refuse_in_conditional(method)
        name = op.lower() if isinstance(op, str) else op
        if name not in REDUCE_OPS:
            raise ValueError(f"{method}: op={op!r} is not a reduction here; valid: {', '.join(REDUCE_OPS)}")
        return str(name)

    def _peer(self, peer: Any, method: str, what: str) -> None:
        if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)) or not 0 <= peer < self.size:
            raise ValueError(f"{method}: {what}={peer!r} is not a rank of this job (0 to {self.size - 1})")

    def _out(self, x: Any, out: Optional[Any], shape: tuple[int, ...], method: str) -> Any:
        if out is None:
            return self._empty(x, shape)
        check_array(out, "out", method)
        if tuple(out.shape) != shape or out.dtype != x.dtype:
            raise ValueError(f"{method}: out is {np.dtype(out.dtype).name}{list(out.shape)}, needs "
                             f"{np.dtype(x.dtype).name}{list(shape)}")
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank} of {self.size} ({self.backend_name}, device {self.device})>"
