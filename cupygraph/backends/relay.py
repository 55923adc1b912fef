"""Relayed arguments and outputs: copy kernels in front of and behind a graph, so a call can bind them.

Zero-copy re-points the kernel-node words that hold a static buffer's address
(``zerocopy/node_pointers.py``). Some graphs hold addresses where no word shows them: a library's
kernels (cuBLASLt's Hopper kernels keep the operands inside tensor-map descriptors; cuBLAS's
workspace, cuFFT's plans), or a memcpy node. Such a graph binds nothing (``CopyReason.LIBRARY_STATE``,
``COPY_NODE``): every call copies its arguments in and its outputs out from Python, around the
launch (a 4-layer cuBLASLt mlp at batch 1: 20 µs of host time a call in copy mode, against 12 in view
mode, H200, 2026-11-27, ``benchmarks/gemm.md``).

A relayed capture records the function on internal copies instead: it first copies each static buffer
into a fresh one with a plain elementwise kernel (a relay), runs the function on the copies, then
(copy mode) copies each output leaf into a fresh output the same way. The static buffers and those
outputs are then read and written by the relays alone, whose words the binder re-points like any
CuPy kernel's, so the compiled replay serves the call: one launch, no copies from the host. The
graph runs one small kernel more per relayed array.

When: the capture is asked to relay (``input_binding="auto"``, not PIECEWISE, at least one warm-up,
no argument known to be written into), and the family's first unrelayed capture copied one of those
buffers for one of those reasons (``RELAY_FIXES``); the family's later captures relay at once
(``FamilyRelays``). Never for a function that writes into its arguments: the unrelayed capture's
warm-ups are checked with ``relayed_fingerprints`` (relayed warm-ups, starting from what an idempotent
write already wrote, could see no change), each relayed warm-up compares the copies with the static
buffers (``WritesArguments``), and a change gives relays up for the family, which then records as ever.
The host reference binds where the GPU would by the same rules (``host/binder.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

from ..errors import CaptureError


class RelayRequest(NamedTuple):
    """What a capture may relay: the positions of the static buffers among the call's arguments, and
    whether its outputs are copied for the caller (``output_mode="copy"``)."""

    positions: tuple[int, ...] = ()
    outputs: bool = False

    def __bool__(self) -> bool:
        return bool(self.positions) or self.outputs


NO_RELAY = RelayRequest()

RELAY_MAX_BYTES = 64 << 20
"""Arrays larger than this are never relayed: a relay holds a second buffer of the array's size for the
graph's lifetime, and a copy per call costs a large array's bandwidth either way."""


def relayable(nbytes: int) -> bool:
    return 0 < nbytes <= RELAY_MAX_BYTES


def carries(value: Any, is_array: Callable[[Any], bool]) -> bool:
    """Whether a relay would carry ``value``: an array (of the backend, ``is_array``) of 1 byte to
    ``RELAY_MAX_BYTES``."""
    return is_array(value) and relayable(int(value.nbytes))


def relayed_positions(args: Sequence[Any], request: RelayRequest, is_array: Callable[[Any], bool]) -> list[int]:
    """The positions of ``request`` whose arguments a relay would carry."""
    return [p for p in request.positions if carries(args[p], is_array)]


def relayed_fingerprints(backend: Any, args: Sequence[Any], request: RelayRequest) -> list[Any]:
    """``backend.fingerprint`` of each argument a relay would carry: compared before and after a capture's
    warm-ups, a change says the function writes into one (then it gets no relays). Empty where none."""
    return [backend.fingerprint(args[p]) for p in relayed_positions(args, request, backend.is_array)]


RELAY_FIXES = frozenset({"library_state", "copy_node"})
"""The ``CopyReason`` values a relay makes bindable: the static buffer or output is then touched by the
copy kernel alone, whatever the library or the memcpy does with the internal copy."""


class WritesArguments(CaptureError):
    """A relayed warm-up changed an internal copy of an argument: the function writes into it, so it is
    recorded without relays (its writes must reach the static buffer, and from there the caller)."""


class FamilyRelays:
    """What one graph family learned: None (not yet), True (relay every capture), False (never)."""

    def __init__(self) -> None:
        self.decided: Optional[bool] = None

    def first(self, request: RelayRequest) -> bool:
        """Whether a capture asked with ``request`` relays from the start."""
        return bool(request) and self.decided is True

    def retry(self, request: RelayRequest, reasons: list[str]) -> bool:
        """After a capture without relays whose buffers were copied for ``reasons``: relay and capture again?"""
        if not request or self.decided is False or not any(r in RELAY_FIXES for r in reasons):
            return False
        self.decided = True
        return True

    def give_up(self) -> None:
        self.decided = False
