"""The narrow interface the registry needs from a backend: buffers, capture, replay, memory.

One backend instance serves one graph family (the graphs of one function): it owns that family's
memory pool, so evicting the family's last graph can hand the memory back.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional

from ..errors import CaptureError
from ..reasons import FallbackReason
from .fastpath.compiled import FamilyState
from .guards.baked_numbers import BakedNumber, warn_changed
from .guards.foreign import Watch, check_watches
from .relay import NO_RELAY, FamilyRelays, RelayRequest
from .timing import HostSample, Sample


class ReplayMismatch(CaptureError):
    """A replay produced outputs that differ from the capture's in structure, shape or value.

    Only a backend that re-executes the function (the host) can see it; the front door marks the
    key failed and runs the call eagerly, so the stale outputs are never returned.
    """

    reason = FallbackReason.REPLAY_MISMATCH


class Recording(abc.ABC):
    """One captured executable: replaying it recomputes ``outputs`` in place from the static inputs."""

    outputs: Any
    """The function's return value at capture: static buffers that every ``launch`` rewrites."""

    nbytes: int
    """Device (or host) bytes this recording keeps alive, static inputs excluded."""

    executable_bytes: Optional[int] = None
    """Device memory the driver took to make and upload this recording's executables, or None where it
    was not measured; ``executable_source`` says how it was measured, or why not (``cache.stats.GraphCost``)."""

    executable_source: str = "not measured by this backend"

    warmup_sample: Optional[Sample] = None
    """The time of the last eager warm-up run before capture (the function's eager time), if any ran."""

    pdl: Any = None
    """What programmatic dependent launch did to this recording (a ``PdlSummary``), if anything."""

    baked_uploads: Sequence[Any] = ()
    """Host uploads replayed from the recording's own snapshots (``uploads.BakedUpload``; issue 20)."""

    routed_calls: Sequence[str] = ()
    """Library calls its warm-ups and capture ran through cupygraph's capture-safe implementations
    (``backends/routing.py``; issue 29), each once: ``"cupy.matmul (cublasGemmEx)"``."""

    scalar_outputs: frozenset[int] = frozenset()
    """Output leaves (in ``pytree.flatten`` order) held as 0-d arrays but returned as the NumPy scalars
    the plain function gives (the host's reductions); CuPy returns 0-d arrays, so none on the GPU."""

    watches: Sequence[Watch] = ()
    """Arrays the recording reads by address without owning them (found at capture in a closure
    or global); ``check_references`` tells whether they are still alive and bound."""

    baked_numbers: Sequence[BakedNumber] = ()
    """Python numbers the function read besides its arguments, as the capture read them (set under
    ``debug=True``): ``check_references`` warns when one changed since (``guards/baked_numbers.py``)."""

    relay_landings: Mapping[int, Any] = MappingProxyType({})
    """Per argument position a relay carries (``backends/relay.py``), the internal copy the recorded function
    reads and writes instead of the static buffer: what a launch wrote there is readable right after it,
    until the family's next launch. Empty where nothing is relayed."""

    @abc.abstractmethod
    def launch(self) -> None:
        """Run the recorded work on the caller's current stream."""

    @abc.abstractmethod
    def release(self) -> None:
        """Drop the executable and the memory only it holds."""

    def binder(self, static: Sequence[Any], labels: Sequence[str], leaves: Sequence[Any], *, bind_outputs: bool,
               counts: Any, name: str, constants: Sequence[tuple[int, Any]] = (), executables: int = 1) -> Any:
        """What rebinds the ``static`` buffers (named ``labels``) and the output ``leaves`` to the caller's
        arrays per call (``binding``), and the ``constants`` ((position, array) read by address) to new
        arrays of their layout, or None where this recording cannot. ``counts``: the entry's
        ``ReplayCounts``, which the binder counts its calls into; ``executables``: how many executables
        may hold different caller addresses (``executables_per_graph``)."""
        return None

    def set_break_hook(self, hook: Callable[[Any, Callable[[], None]], Callable[[], None]]) -> None:  # noqa: B027
        """Wrap the launch of every graph break (an eager op between PIECEWISE pieces) once:
        ``hook(op, launch)`` gives the launch to run instead. Nothing to do without graph breaks."""

    def check_references(self, fn_name: str) -> None:
        """Debug mode, before a replay: ``ForeignMemoryError`` when a watched array was freed or rebound, a
        ``BakedNumberWarning`` when a number the graph was captured with changed."""
        if self.watches:
            check_watches(self.watches, fn_name)
        if self.baked_numbers:
            warn_changed(self.baked_numbers, fn_name)

    def to_dot(self) -> str:
        """The recorded graph in Graphviz DOT, where the backend can describe it."""
        raise NotImplementedError(f"{type(self).__name__} cannot describe its graph as DOT")


class Backend(abc.ABC):
    """How to allocate static buffers, record a function onto them, and replay it."""

    name: str
    xp: Any
    """The array module (numpy or cupy) for this backend's arrays."""

    array_type: type[Any]
    """The array class this backend copies and captures (numpy.ndarray or cupy.ndarray)."""

    device_id: int = -1
    """The device whose memory this family's graphs and buffers use (-1: the host)."""

    per_device: bool = False
    """Whether arrays can live on several devices, each needing its own family (``on_device``)."""

    has_pool = False
    """Whether the family's static buffers and captures take their memory from a pool of its own, which
    ``pool_bytes`` counts (the GPU's); else a key's memory is the static buffers made for it."""

    @abc.abstractmethod
    def is_array(self, value: Any) -> bool:
        """True for arrays this backend can copy into static buffers or capture by address."""

    @abc.abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A static buffer from this family's pool; it stays put while a graph uses it."""

    @abc.abstractmethod
    def copy_rows(self, dst: Any, src: Any, stream: Any = None) -> None:
        """``dst[:len(src)] = src`` on ``stream`` (default: the caller's current stream)."""

    @abc.abstractmethod
    def fill_rows(self, dst: Any, start: int, value: Any, stream: Any = None) -> None:
        """``dst[start:] = value``: the padding rows."""

    def repeat_row(self, dst: Any, start: int, stream: Any = None) -> None:
        """``dst[start:] = dst[start - 1]``: padding rows that repeat the last real row (``pad_mode="edge"``).
        One broadcast assignment on NumPy and CuPy alike (CuPy runs it on the current stream, the call's)."""
        dst[start:] = dst[start - 1]

    @abc.abstractmethod
    def copy_out(self, array: Any, stream: Any = None) -> Any:
        """A fresh array the caller owns, with ``array``'s contents."""

    @abc.abstractmethod
    def capture(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], *,
        num_warmups: int, capture_mode: str, gc_freeze: bool, piecewise: bool = False, pdl: str = "auto",
        bind: bool = True, relay: RelayRequest = NO_RELAY,
    ) -> Recording:
        """Warm up, then record ``fn(*args, **kwargs)``; raise ``CaptureError`` naming what failed.

        With ``piecewise``, ops marked ``graph_break`` split the recording into pieces and run
        eagerly between them on replay. ``pdl`` is the config's ``pdl`` (programmatic edges
        between kernels that wait; only a backend that records graph edges uses it). ``bind``: whether
        replays may bind arguments zero-copy (``input_binding="auto"``): otherwise nothing is read
        for it after capture. ``relay``: the static buffers and outputs the capture may put behind copy
        kernels where that lets calls bind them (``backends/relay.py``).
        """

    @functools.cached_property
    def relays(self) -> FamilyRelays:
        """Whether this family's captures relay their static buffers and outputs (``backends/relay.py``)."""
        return FamilyRelays()

    @functools.cached_property
    def family(self) -> Any:
        """This graph family's ``FamilyState``: its generation changes whenever something a compiled
        replay record describes may have changed (``backends/fastpath/record.py``)."""
        return FamilyState()

    def fingerprint(self, array: Any) -> Any:
        """What tells later, by ``==``, whether any byte of ``array`` changed: a function writing into
        an array it reads by address (``cache/first_call.py``). Here its bytes (a host copy); the GPU
        backend hashes them on the device, where a copy of large weights would double their memory."""
        return array.tobytes()

    def may_share_memory(self, a: Any, b: Any) -> bool:
        """Whether two arrays of this backend may overlap in memory (bounds, not elements)."""
        return bool(self.xp.may_share_memory(a, b))

    def address(self, array: Any) -> int:
        """The array's data address (or a stable identity for host arrays)."""
        return int(array.__array_interface__["data"][0])

    def device_of(self, array: Any) -> int:
        return -1

    def on_device(self, device: int) -> Backend:
        """A new backend of this kind for ``device`` (a graph family there, with its own pool)."""
        raise NotImplementedError(f"the {self.name} backend has one device")

    def order_after_last_use(self) -> Any:
        """Order this call after the family's previous call when it came on another stream.

        Returns the stream handle the copies of this call should use (passed back as ``stream``).
        """
        return None

    def start_sample(self) -> Sample:
        """Start timing work enqueued from now on the current stream (stop it after the work)."""
        return HostSample()

    def pool_bytes(self) -> int:
        """Bytes this family's pool holds from the device, in use or cached."""
        return 0

    def release_memory(self) -> None:  # noqa: B027 (optional hook: nothing to release by default)
        """Return cached pool memory; called when the family holds no graph."""

    def synchronize(self) -> None:  # noqa: B027 (optional hook: a synchronous backend has nothing to wait for)
        """Wait for all work this backend enqueued (tests and timing only; never on the hot path)."""


def on_gpu(*values: Any) -> bool:
    """Whether any of ``values`` is a CuPy array or value (told by its type's module, so CuPy is never
    imported here): the test by which linalg and control flow pick the GPU or the host route."""
    return any(type(v).__module__.split(".", 1)[0] == "cupy" for v in values)
