"""The CuPy side of relays (``backends/relay.py``): the function run on internal copies of its static
buffers, its outputs copied into fresh arrays, each copy one elementwise kernel the binder can re-point."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ...pytree import flatten, unflatten
from ..relay import RelayRequest, WritesArguments, carries

_copy: Optional[Any] = None


def relay_copy(src: Any, dst: Any) -> None:
    """``dst[...] = src`` as one elementwise kernel: never a memcpy node, which no call could re-point."""
    global _copy
    if _copy is None:
        _copy = cupy.ElementwiseKernel("T src", "T dst", "dst = src", "cupygraph_relay_copy")
    _copy(src, dst)


def _fresh_copy(array: Any) -> Any:
    out = cupy.empty(array.shape, dtype=array.dtype)
    relay_copy(array, out)
    return out


def _is_cupy(value: Any) -> bool:
    return isinstance(value, cupy.ndarray)


def _relayed_array(value: Any) -> bool:
    return carries(value, _is_cupy)


class RelayedCall:
    """``fn`` with the arguments at ``request.positions`` replaced by internal copies, and (with
    ``request.outputs``) every array leaf of its result copied into a fresh array."""

    def __init__(self, fn: Callable[..., Any], request: RelayRequest):
        self.fn, self.request = fn, request
        self._copies: list[tuple[int, Any, Any]] = []
        """(position, static buffer, internal copy) of the last run."""
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = list(args)
        self._copies = []
        for position in self.request.positions:
            static = call[position]
            if _relayed_array(static):
                inner = _fresh_copy(static)
                self._copies.append((position, static, inner))
                call[position] = inner
        result = self.fn(*call, **kwargs)
        if not self.request.outputs:
            return result
        leaves, spec = flatten(result, lambda v: isinstance(v, cupy.ndarray))
        return unflatten(spec, [_fresh_copy(leaf) if _relayed_array(leaf) else leaf for leaf in leaves])

    def check_unwritten(self) -> None:
        """After an eager run: raise ``WritesArguments`` where the function changed a copy (byte for byte,
        so a NaN that stayed a NaN is no change)."""
        for _, static, inner in self._copies:
            if bool((_bytes(static) != _bytes(inner)).any()):
                raise WritesArguments(f"{self.__name__}() writes into an argument: recorded without relays")
        self._copies = []


    def landings(self) -> dict[int, Any]:
        """After the capture run: per relayed position, a view of the internal copy the graph reads and
        writes (``Recording.relay_landings``). The view owns nothing: the memory is the recording's own
        graph memory, which lives as long as the recording, so no second buffer is held for it."""
        return {position: _unowned_view(inner) for position, _, inner in self._copies}


def _unowned_view(array: Any) -> Any:
    memory = cupy.cuda.UnownedMemory(int(array.data.ptr), int(array.nbytes), None, array.device.id)
    return cupy.ndarray(array.shape, array.dtype, cupy.cuda.MemoryPointer(memory, 0), array.strides)


def landings_of(call: Callable[..., Any]) -> dict[int, Any]:
    return call.landings() if isinstance(call, RelayedCall) else {}


def _bytes(array: Any) -> Any:
    return cupy.ascontiguousarray(array).reshape(-1).view(cupy.uint8)


def relayed(fn: Callable[..., Any], request: RelayRequest) -> Callable[..., Any]:
    return RelayedCall(fn, request) if request else fn


def check_warmup(call: Callable[..., Any]) -> None:
    if isinstance(call, RelayedCall):
        call.check_unwritten()


def relayed_addresses(args: Sequence[Any], leaves: Sequence[Any], request: RelayRequest) -> frozenset[int]:
    """The addresses only the relays of a relayed capture touch: its static buffers, and (with
    ``request.outputs``) its output leaves."""
    found = {int(args[p].data.ptr) for p in request.positions if _relayed_array(args[p])}
    if request.outputs:
        found |= {int(leaf.data.ptr) for leaf in leaves if _relayed_array(leaf)}
    return frozenset(found)


def copy_reasons(bindings: Any, args: Sequence[Any], leaves: Sequence[Any], request: RelayRequest) -> list[str]:
    """Why a capture without relays copies the buffers ``request`` could relay (``CopyReason`` values);
    ``leaves``: its output leaves, in the order of ``bindings.outputs``."""
    if bindings is None or not request:
        return []
    reasons = [bindings.inputs.get(int(args[p].data.ptr)) for p in request.positions if _relayed_array(args[p])]
    if request.outputs:
        reasons += [facts for facts, leaf in zip(bindings.outputs, leaves) if _relayed_array(leaf)]
    return [facts.reason.value for facts in reasons if facts is not None and facts.reason is not None]

