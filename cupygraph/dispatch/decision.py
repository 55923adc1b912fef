"""The one decision: whether a batch replays a graph, in which runtime mode, at which padded descriptor.

Every front door asks ``decide`` and nothing else pads a batch or applies a token limit:
``CudagraphDispatcher`` (``dispatch`` returns its decision as vLLM's pair), and through a
dispatcher ``jit``, ``CUDAGraphManager`` and ``StreamDispatcher``'s runners; the registry's
batch-size API and ``CUDAGraphConfig.should_use_cudagraph`` through ``decide_for_config`` (the
keys and default policy the config alone describes); ``CUDAGraphWrapper`` through the forward
context a caller fills with a decision (``cudagraph_context(*decision)``).

The rules, in the order ``decide`` applies them:

1. Keys made for mode NONE: eager (``mode_none``). Keys not initialised: eager (``no_graph_mode``).
2. Padding, with ``sizes.pad_to_capture_size`` (the one padding helper), on each mode's own
   ladder (``DispatchKeys``: vLLM builds each mode's candidates independently). A sequence length
   is padded to its ``seq_len_buckets`` bucket (above the largest: eager); without buckets it is
   not a key axis and is dropped from the descriptor. Every batch is padded to the smallest
   capture size, the mixed ladder (above the largest: eager). A uniform-decode batch whose size is
   a multiple of the query length is also padded on the uniform-decode ladder (the capture sizes
   rounded up to multiples of the query length, within the largest size and ``max_num_reqs``
   requests), to whole requests and the request count of the padded size.
3. Token limits, on the REAL batch size (before padding): a batch smaller than the policy's
   ``min_tokens_for_graph`` or larger than its ``max_tokens_for_graph`` runs eagerly.
4. Keys (vLLM), each mode on its ladder: FULL takes the uniform-decode key, else the mixed padded
   key exact, else relaxed (no request count, not uniform); PIECEWISE the relaxed mixed key, so a
   mixed batch never pays for decode's rounding (12 tokens: PIECEWISE 16, not 18). Cascade
   attention rules FULL out. No key: eager.
5. The policy, asked with the relaxed padded key (the uniform-decode one where there is one):
   ``should_use_graph(key, True)`` may veto, ``select_mode(key, modes with a key)`` chooses; NONE
   or a mode without a key: eager (``policy_veto``).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Union

from ..config.batch_decision import install_batch_decision
from ..config.modes import CUDAGraphMode, short_repr
from ..config.sizes import check_positive_int, decode_capture_sizes, outside_token_limits, pad_to_capture_size
from ..config.values import is_bool
from ..reasons import FallbackReason
from .descriptor import BatchDescriptor, check_config, check_descriptor
from .policy import DefaultDispatchPolicy, DispatchPolicy

if TYPE_CHECKING:
    from ..config.model import CUDAGraphConfig

NONE, PIECEWISE, FULL = CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL
RUNTIME_GRAPH_MODES = (PIECEWISE, FULL)


@dataclasses.dataclass(frozen=True)
class Decision:
    """What ``decide`` decided for one batch; unpacks as vLLM's ``(mode, descriptor)`` pair.

    Attributes:
        mode: the runtime mode: FULL or PIECEWISE (replay, capturing first if needed) or NONE (eager).
        descriptor: the padded descriptor the graph is captured and replayed under; None for NONE.
        reason: why the batch runs eagerly (mode NONE only), a fixed code.
        detail: this occurrence's detail (one bounded line), or None when the code's text says all.
    """

    mode: CUDAGraphMode
    descriptor: Optional[BatchDescriptor] = None
    reason: Optional[FallbackReason] = None
    detail: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.mode, CUDAGraphMode) or not self.mode.valid_runtime_modes():
            raise ValueError(f"a Decision's mode is a runtime mode (NONE, PIECEWISE, FULL), got {self.mode!r}")
        graphed = self.mode is not NONE
        if graphed != (self.descriptor is not None) or graphed == (self.reason is not None):
            raise ValueError(
                "a Decision runs a graph (FULL/PIECEWISE with a descriptor and no reason) or runs eagerly "
                f"(NONE with a reason and no descriptor), got {self.mode.name}, {self.descriptor}, {self.reason}"
            )

    @classmethod
    def eager(cls, reason: FallbackReason, detail: Optional[str] = None) -> Decision:
        return cls(NONE, None, reason, detail)

    @property
    def graphed(self) -> bool:
        return self.mode is not NONE

    @property
    def padded(self) -> BatchDescriptor:
        """The padded descriptor of a graphed decision (raises for one that runs eagerly)."""
        if self.descriptor is None:
            raise ValueError(f"the batch runs eagerly ({self.explain()}): it has no padded descriptor")
        return self.descriptor

    def explain(self) -> str:
        """One line: the mode and padded descriptor, or why the batch runs eagerly."""
        if self.reason is not None:
            return self.reason.describe(self.detail)
        return f"{self.mode.name} at {self.descriptor}"

    def __iter__(self) -> Iterator[Any]:
        return iter((self.mode, self.descriptor))


@dataclasses.dataclass
class DispatchKeys:
    """The keys graphs may be captured and replayed under (vLLM's ``cudagraph_keys``, in ``by_mode``),
    the mode and query length they were made for, and the ladder of sizes each kind of graph sits on.

    ``mixed_sizes``: the config's capture sizes, as given; mixed batches pad to them, and the graphs
    of the mixed mode (PIECEWISE, or FULL under mode FULL) sit on them. ``decode_sizes``: the FULL
    uniform-decode graphs of separate-routine modes, on those sizes rounded up to multiples of the
    query length (``sizes.decode_capture_sizes``); empty for other modes.

    Mutable: a ``CudagraphDispatcher`` adds keys to it under its lock; ``decide`` only reads it.
    """

    mode: CUDAGraphMode = NONE
    uniform_decode_query_len: int = 1
    by_mode: dict[CUDAGraphMode, set[BatchDescriptor]] = dataclasses.field(
        default_factory=lambda: {PIECEWISE: set(), FULL: set()}
    )
    mixed_sizes: tuple[int, ...] = ()
    decode_sizes: tuple[int, ...] = ()
    initialized: bool = False

    def add(self, runtime_mode: CUDAGraphMode, descriptor: BatchDescriptor) -> None:
        if runtime_mode not in RUNTIME_GRAPH_MODES:
            name = getattr(runtime_mode, "name", short_repr(runtime_mode))
            raise ValueError(f"cudagraph keys are added for PIECEWISE or FULL only, got runtime_mode={name}")
        self.by_mode[runtime_mode].add(check_descriptor(descriptor, "batch_descriptor"))

    def ladders(self) -> dict[CUDAGraphMode, tuple[int, ...]]:
        """The sizes each runtime mode's graphs sit on, for the mode the keys were made for."""
        ladders: dict[CUDAGraphMode, tuple[int, ...]] = {}
        mixed = self.mode.mixed_mode()
        if mixed in RUNTIME_GRAPH_MODES:
            ladders[mixed] = self.mixed_sizes
        if self.mode.has_uniform_decode_graphs():
            ladders[FULL] = self.decode_sizes
        return ladders

    def initialize(self, config: CUDAGraphConfig, mode: CUDAGraphMode, uniform_decode_query_len: int) -> None:
        """Build each mode's ladder and add its keys, for every size of it (and seq_len bucket).

        Mixed batches get ``BatchDescriptor(s)`` (and ``BatchDescriptor(s, seq_len=b)`` per bucket)
        under the mixed mode, for every capture size of ``config``. Separate-routine modes with a
        FULL decode mode also get uniform-decode keys ``BatchDescriptor(s, s // q, uniform_decode=True)``,
        ``q = uniform_decode_query_len``, on their own ladder: the capture sizes rounded up to
        multiples of ``q`` within the largest capture size and ``q * max_num_reqs`` (vLLM's rule), so
        uniform-decode batches pad to whole requests and replay FULL while mixed batches keep the
        capture sizes as given.
        """
        mode = CUDAGraphMode.parse(mode)
        q = check_positive_int(uniform_decode_query_len, "uniform_decode_query_len")
        sizes = config.cudagraph_capture_sizes
        buckets = config.seq_len_buckets
        seq_axes: list[Optional[int]] = [None, *buckets] if buckets else [None]
        self.mode, self.uniform_decode_query_len = mode, q
        self.mixed_sizes = tuple(sizes)
        mixed = mode.mixed_mode()
        if mixed in RUNTIME_GRAPH_MODES:
            for s in sizes:
                for seq in seq_axes:
                    self.add(mixed, BatchDescriptor(s, seq_len=seq))
        self.decode_sizes = ()
        if mode.has_uniform_decode_graphs():
            self.decode_sizes = decode_capture_sizes(sizes, q, config.max_num_reqs)
            for s in self.decode_sizes:
                for seq in seq_axes:
                    self.add(FULL, BatchDescriptor(s, s // q, uniform_decode=True, seq_len=seq))
        self.initialized = True


@dataclasses.dataclass(frozen=True)
class _Padded:
    """A batch padded on each ladder: ``mixed`` on the capture sizes (relaxed: the key of a general
    graph), ``decode`` on the uniform-decode ladder (None unless the batch is uniform decode and
    fits it)."""

    batch: BatchDescriptor
    mixed: BatchDescriptor
    decode: Optional[BatchDescriptor]

    def mixed_exact(self) -> BatchDescriptor:
        """``mixed`` with the batch's request count and uniformity (vLLM's exact key)."""
        if self.batch.num_reqs is None and not self.batch.uniform_decode:
            return self.mixed
        batch = self.batch
        return BatchDescriptor(self.mixed.num_tokens, batch.num_reqs, batch.uniform_decode, self.mixed.seq_len)

    def primary(self) -> BatchDescriptor:
        """Not relaxed, the uniform-decode key where the batch has one, else the exact mixed key."""
        return self.decode if self.decode is not None else self.mixed_exact()


def _pad(config: CUDAGraphConfig, batch: BatchDescriptor, keys: DispatchKeys) -> Union[_Padded, Decision]:
    """``batch`` padded on each ladder and to its seq_len bucket, or the eager decision when it cannot be."""
    seq_len = None
    buckets = config.seq_len_buckets
    if batch.seq_len is not None and buckets:
        seq_len = config.get_padded_seq_len(batch.seq_len)
        if seq_len is None:
            return Decision.eager(
                FallbackReason.SEQ_LEN_ABOVE_LARGEST,
                f"sequence length {batch.seq_len} is above the largest seq_len bucket {buckets[-1]}",
            )
    # The decode ladder never passes the largest capture size, so a batch above that is eager in every mode.
    padded = pad_to_capture_size(batch.num_tokens, keys.mixed_sizes)
    if padded is None:
        if not keys.mixed_sizes:
            return Decision.eager(FallbackReason.NO_GRAPH_MODE, "no capture sizes: nothing is captured")
        return Decision.eager(
            FallbackReason.ABOVE_LARGEST,
            f"batch of {batch.num_tokens} is above the largest capture size {keys.mixed_sizes[-1]}",
        )
    decode = None
    q = keys.uniform_decode_query_len
    if batch.uniform_decode and batch.num_tokens % q == 0:
        size = pad_to_capture_size(batch.num_tokens, keys.decode_sizes)
        if size is not None:
            decode = BatchDescriptor(size, size // q, True, seq_len)
    return _Padded(batch, BatchDescriptor(padded, seq_len=seq_len), decode)


def padded_descriptor(config: CUDAGraphConfig, batch: BatchDescriptor, keys: DispatchKeys) -> Optional[BatchDescriptor]:
    """``batch`` padded as ``decide`` pads it for the policy (not relaxed): on the uniform-decode
    ladder where it fits there, else on the capture sizes; None when it cannot be padded."""
    _check_arguments(config, batch, keys)
    padded = _pad(config, batch, keys)
    return padded.primary() if isinstance(padded, _Padded) else None


def decide(
    config: CUDAGraphConfig,
    batch: BatchDescriptor,
    keys: DispatchKeys,
    policy: DispatchPolicy,
    use_cascade_attn: bool = False,
) -> Decision:
    """Whether ``batch`` (real, unpadded) replays a graph, in which runtime mode, at which padded
    descriptor; see the module docstring for the rules and their order."""
    _check_arguments(config, batch, keys)
    if not isinstance(policy, DispatchPolicy):
        raise TypeError(f"policy must be a DispatchPolicy, got {type(policy).__name__} {short_repr(policy)}")
    if not is_bool(use_cascade_attn):
        raise TypeError(f"use_cascade_attn must be a bool, got {type(use_cascade_attn).__name__} "
                        f"{short_repr(use_cascade_attn)}")
    if not keys.mode.has_graphs():
        return Decision.eager(FallbackReason.MODE_NONE)
    if not keys.initialized:
        return Decision.eager(
            FallbackReason.NO_GRAPH_MODE, "the dispatcher's keys are not initialised (initialize_cudagraph_keys)"
        )
    padded = _pad(config, batch, keys)
    if isinstance(padded, Decision):
        return padded
    outside = outside_token_limits(batch.num_tokens, *policy.token_limits())
    if outside is not None:
        return Decision.eager(FallbackReason.OUTSIDE_TOKEN_LIMITS, outside)
    mixed = padded.mixed
    full_keys, piecewise_keys = keys.by_mode[FULL], keys.by_mode[PIECEWISE]
    # dict order is preference order: FULL before PIECEWISE, as vLLM tries them.
    candidates: dict[CUDAGraphMode, BatchDescriptor] = {}
    if not use_cascade_attn:
        if padded.decode is not None and padded.decode in full_keys:
            candidates[FULL] = padded.decode
        elif (exact := padded.mixed_exact()) in full_keys:
            candidates[FULL] = exact
        elif mixed in full_keys:
            candidates[FULL] = mixed
    if mixed in piecewise_keys:
        candidates[PIECEWISE] = mixed
    if not candidates:
        cascade = " with cascade attention" if use_cascade_attn else ""
        return Decision.eager(
            FallbackReason.NO_GRAPH_MODE, f"no graph mode for {batch} under mode {keys.mode.name}{cascade}"
        )
    name = type(policy).__name__
    key = mixed if padded.decode is None else padded.decode.relaxed()
    if not policy.should_use_graph(key, True):
        return Decision.eager(FallbackReason.POLICY_VETO, f"{name} vetoed the graph for {key}")
    mode = policy.select_mode(key, list(candidates))
    chosen = candidates.get(mode) if isinstance(mode, CUDAGraphMode) else None
    if chosen is None:
        offered = ", ".join(m.name for m in candidates)
        return Decision.eager(
            FallbackReason.POLICY_VETO,
            f"{name} chose {getattr(mode, 'name', short_repr(mode, 40))} for {key} out of {offered}",
        )
    return Decision(mode, chosen)


def _check_arguments(config: Any, batch: Any, keys: Any) -> None:
    check_config(config)
    check_descriptor(batch, "batch")
    if not isinstance(keys, DispatchKeys):
        raise TypeError(f"keys must be DispatchKeys (a dispatcher's .keys), got {type(keys).__name__} "
                        f"{short_repr(keys)}")


@functools.lru_cache(maxsize=8)
def _config_rules(config: CUDAGraphConfig) -> tuple[DispatchKeys, DefaultDispatchPolicy]:
    # A config is immutable (and hashable), so the keys it describes are made once per config.
    keys = DispatchKeys()
    keys.initialize(config, config.mode, config.uniform_decode_query_len)
    return keys, DefaultDispatchPolicy.from_config(config)


def decide_for_config(config: CUDAGraphConfig, batch: BatchDescriptor, use_cascade_attn: bool = False) -> Decision:
    """``decide`` with the keys and the default policy ``config`` alone describes: what a dispatcher
    made from the config decides. The config's ``should_use_cudagraph`` and the registry's
    batch-size API answer with it."""
    check_config(config)
    keys, policy = _config_rules(config)
    return decide(config, batch, keys, policy, use_cascade_attn)


def capture_ladders(config: CUDAGraphConfig) -> dict[CUDAGraphMode, tuple[int, ...]]:
    """The sizes each runtime mode's graphs sit on under ``config`` (``DispatchKeys.ladders``)."""
    check_config(config)
    keys, _ = _config_rules(config)
    return keys.ladders()


def decide_batch_size(
    config: CUDAGraphConfig, batch_size: int, seq_len: Optional[int] = None, *,
    num_reqs: Optional[int] = None, uniform_decode: bool = False,
) -> Decision:
    """``decide_for_config`` for a batch given by its size; an empty batch (0) runs eagerly."""
    if isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool) and batch_size == 0:
        return Decision.eager(FallbackReason.EMPTY_BATCH)
    check_positive_int(batch_size, "batch_size")
    return decide_for_config(config, BatchDescriptor(batch_size, num_reqs, uniform_decode, seq_len))


def padded_batch_size(
    config: CUDAGraphConfig, batch_size: int, *, num_reqs: Optional[int] = None, uniform_decode: bool = False,
) -> Optional[int]:
    """The size a batch of ``batch_size`` real rows pads to: its graph's when the decision replays
    one, else where it would pad (``padded_descriptor``); None above the largest capture size."""
    check_positive_int(batch_size, "batch_size")
    decision = decide_batch_size(config, batch_size, num_reqs=num_reqs, uniform_decode=uniform_decode)
    if decision.descriptor is not None:
        return decision.descriptor.num_tokens
    keys, _ = _config_rules(config)
    padded = padded_descriptor(config, BatchDescriptor(batch_size, num_reqs, uniform_decode), keys)
    return None if padded is None else padded.num_tokens


# CUDAGraphConfig.should_use_cudagraph and get_padded_batch_size ask these.
install_batch_decision(decide_batch_size, padded_batch_size)
