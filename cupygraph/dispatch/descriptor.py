"""``BatchDescriptor``: the key a batch is dispatched, captured and replayed under."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Optional

from ..config.model import CUDAGraphConfig
from ..config.modes import CUDAGraphMode, short_repr
from ..config.sizes import (
    DEFAULT_MAX_CAPTURE_SIZE,
    check_positive_int,
    decode_capture_sizes,
    default_max_capture_size,
    normalise_sizes,
    resolve_capture_sizes,
)


@dataclasses.dataclass(frozen=True)
class BatchDescriptor:
    """Key for CUDA graph lookup (vLLM's ``BatchDescriptor``; the seed's ``DispatchKey``, in ``compat.aliases``).

    Attributes:
        num_tokens: rows along the batch axis (the padded size once dispatched).
        num_reqs: requests in the batch, when the caller tracks them (None: not part of the key).
        uniform_decode: every request contributes ``uniform_decode_query_len`` tokens.
        seq_len: optional second key axis (padded to a bucket once dispatched).
    """

    num_tokens: int
    num_reqs: Optional[int] = None
    uniform_decode: bool = False
    seq_len: Optional[int] = None

    def __post_init__(self) -> None:
        # NumPy integers are stored as Python ints, so keys print, compare and serialise alike.
        object.__setattr__(self, "num_tokens", check_positive_int(self.num_tokens, "num_tokens"))
        if self.num_reqs is not None:
            object.__setattr__(self, "num_reqs", check_positive_int(self.num_reqs, "num_reqs"))
        if self.seq_len is not None:
            object.__setattr__(self, "seq_len", check_positive_int(self.seq_len, "seq_len"))
        if not isinstance(self.uniform_decode, bool):
            raise TypeError(f"uniform_decode must be a bool, got {self.uniform_decode!r}")

    def relaxed(self) -> BatchDescriptor:
        """The same batch without the request count and uniformity: the key a general graph serves."""
        if self.num_reqs is None and not self.uniform_decode:
            return self
        return BatchDescriptor(self.num_tokens, seq_len=self.seq_len)

    @property
    def is_prefill(self) -> bool:
        return not self.uniform_decode



def check_descriptor(value: Any, name: str) -> BatchDescriptor:
    """``value`` if it is a ``BatchDescriptor``; else a TypeError naming ``name`` and what it takes."""
    if not isinstance(value, BatchDescriptor):
        hint = " (build one: BatchDescriptor(num_tokens) or create_dispatch_key(...))"
        raise TypeError(f"{name} must be a BatchDescriptor{hint}, got {type(value).__name__} {short_repr(value)}")
    return value


def check_config(value: Any, name: str = "config") -> CUDAGraphConfig:
    """``value`` if it is a ``CUDAGraphConfig``; else a TypeError naming ``name``."""
    if not isinstance(value, CUDAGraphConfig):
        raise TypeError(f"{name} must be a CUDAGraphConfig (CUDAGraphConfig.from_dict makes one from a dict), "
                        f"got {type(value).__name__} {short_repr(value)}")
    return value


def create_dispatch_key(
    num_tokens: int,
    num_reqs: Optional[int] = None,
    max_seq_len: Optional[int] = None,
    is_prefill: bool = True,
) -> BatchDescriptor:
    """Factory for dispatch keys; a non-prefill batch is uniform decode."""
    if not isinstance(is_prefill, bool):
        raise TypeError(f"is_prefill must be a bool, got {type(is_prefill).__name__} {short_repr(is_prefill)}")
    return BatchDescriptor(num_tokens, num_reqs, uniform_decode=not is_prefill, seq_len=max_seq_len)


def get_padded_key(key: BatchDescriptor, pad_to: int) -> BatchDescriptor:
    """``key`` with ``num_tokens`` padded to ``pad_to`` (which must not be smaller)."""
    check_descriptor(key, "key")
    check_positive_int(pad_to, "pad_to")
    if pad_to < key.num_tokens:
        raise ValueError(f"pad_to={pad_to} is smaller than the key's num_tokens={key.num_tokens}")
    return dataclasses.replace(key, num_tokens=pad_to)


def get_cudagraph_sizes(
    capture_sizes: Optional[Sequence[int]],
    max_num_reqs: Optional[int],
    max_num_tokens: Optional[int],
    mode: CUDAGraphMode,
    uniform_decode_query_len: int = 1,
) -> list[int]:
    """The sizes to capture for a scheduler's limits, by vLLM's rules.

    Given ``capture_sizes`` are kept up to ``max_num_tokens``. Unset, the defaults go up to
    min(2 x max_num_reqs x query length, 512) (512 without ``max_num_reqs``), and not past
    ``max_num_tokens``: ``(None, 128, 2048, FULL_AND_PIECEWISE)`` stops at 256. These are the
    config's capture sizes, never rounded to the query length: mixed batches and PIECEWISE graphs
    use them as they are, and the FULL uniform-decode graphs of FULL_AND_PIECEWISE sit on them
    rounded up (``decode_capture_sizes``). Mode NONE captures nothing; FULL_DECODE_ONLY graphs
    only serve uniform-decode batches, so its sizes are that ladder itself: rounded up to
    multiples of the query length, up to ``max_num_reqs`` x query length.
    """
    mode = CUDAGraphMode.parse(mode)
    if not mode.has_graphs():
        return []
    if max_num_tokens is not None:
        max_num_tokens = check_positive_int(max_num_tokens, "max_num_tokens")
    if max_num_reqs is not None:
        max_num_reqs = check_positive_int(max_num_reqs, "max_num_reqs")
    q = check_positive_int(uniform_decode_query_len, "uniform_decode_query_len")
    largest: Optional[int] = None
    sizes: Optional[list[int]] = None
    if capture_sizes is None:
        largest = min(default_max_capture_size(max_num_reqs, q), max_num_tokens or DEFAULT_MAX_CAPTURE_SIZE)
    else:
        sizes = [s for s in normalise_sizes(capture_sizes) if max_num_tokens is None or s <= max_num_tokens]
        if not sizes:
            return []
    _, resolved = resolve_capture_sizes(sizes, largest, max_num_reqs, q)
    if mode is CUDAGraphMode.FULL_DECODE_ONLY:
        return list(decode_capture_sizes(resolved, q, max_num_reqs))
    return resolved
