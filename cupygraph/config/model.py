"""The validated, immutable ``CUDAGraphConfig`` (the default config and ``CUPYGRAPH_DISABLE``: ``defaults.py``).

The config's parts live beside it and import nothing above them: ``modes.py``, ``values.py``
(single values), ``rules.py`` (across fields), ``messages.py``, ``sizes.py``; files: ``files.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from ..errors import ConfigError
from . import rules
from .batch_decision import installed as _installed
from .messages import field_path, format_validation_error
from .modes import CUDAGraphMode
from .rules import MAX_DEFAULT_CAPTURE_SIZE, MAX_LIST_LENGTH, MAX_WARMUPS
from .sizes import check_positive_int, pad_to_capture_size, resolve_capture_sizes
from .uploads import HOST_UPLOADS, HostUploads
from .values import MAX_INT, PositiveInt, as_bool, as_number, choice, integral_to_int, parse_byte_size

__all__ = [
    "MAX_DEFAULT_CAPTURE_SIZE", "MAX_LIST_LENGTH", "MAX_WARMUPS", "CUDAGraphConfig", "CUDAGraphMode",
    "field_path", "format_validation_error", "parse_byte_size",
]



class CUDAGraphConfig(BaseModel):
    """Configuration for CUDA graph capture and replay.

    Every field is documented where it is declared; the README's configuration reference and the
    JSON schema (``cupygraph schema``) are generated from these descriptions.
    """

    # Frozen: a front door builds its keys and buffers from the config once, so a field changed
    # afterwards would be silently ignored. Derive a new config with ``replace`` instead.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)

    # The schema shows the names config files use, not the enum's internal int/tuple values.
    mode: Annotated[
        CUDAGraphMode, WithJsonSchema({"type": "string", "enum": list(CUDAGraphMode.__members__)})
    ] = Field(
        CUDAGraphMode.FULL,
        description="Graph mode by name: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY or FULL_AND_PIECEWISE "
        "(case-insensitive; the enum's numbers such as 2 are not accepted). FULL_* modes replay "
        "whole-function graphs for uniform-decode batches. NONE captures nothing, so it also accepts "
        "capture_sizes: [] and max_capture_size: 0 (as vLLM does).",
        json_schema_extra={"default": "FULL"},
    )
    capture_sizes: Optional[tuple[PositiveInt, ...]] = Field(
        None,
        description="Batch sizes (tokens) to capture graphs for; a batch is padded to the smallest one that "
        "fits. Unset: vLLM's [1, 2, 4] + 8..248 step 8 + 256..max_capture_size step 16. Given sizes are "
        "de-duplicated and sorted; at most 4096. Each mode keeps its own sizes, as vLLM does under "
        "speculative decoding: mixed batches and PIECEWISE graphs use these as given; the FULL graphs of "
        "uniform-decode batches (modes FULL_DECODE_ONLY, FULL_AND_PIECEWISE) sit on them rounded up to "
        "multiples of uniform_decode_query_len, up to the largest size and max_num_reqs requests. With [1, 2, "
        "4, 8, 16, 24] and 3: decode graphs at 3, 6, 9, 18, 24, so 12 decode tokens pad to 18 and a mixed "
        "batch of 12 to 16.",
    )
    max_capture_size: Optional[StrictInt] = Field(
        None, ge=0, le=MAX_INT,
        description="Largest batch size captured; larger batches run eagerly and count as fallbacks. "
        "Unset: the largest of capture_sizes when those are given, else min(2 x max_num_reqs x "
        "uniform_decode_query_len, 512), or 512 without max_num_reqs (vLLM's default). Given together "
        "with capture_sizes, it must equal their largest. At most 65536 without capture_sizes; 0 only "
        "under mode NONE. Unlike vLLM, which lowers this field to the largest size it captures, the "
        "value is kept as given or derived: where the default sizes skip it (300: 288), "
        "largest_capture_size tells which batches replay.",
    )
    max_num_reqs: Optional[StrictInt] = Field(
        None, ge=1, le=MAX_INT,
        description="Most requests in a batch (vLLM's max_num_seqs). FULL graphs for uniform-decode batches "
        "stop at max_num_reqs x uniform_decode_query_len tokens; it also sets the default max_capture_size.",
    )
    uniform_decode_query_len: StrictInt = Field(
        1, ge=1, le=MAX_INT,
        description="Tokens per request in a uniform-decode batch: 1, or 1 + the speculative tokens "
        "(num_tokens == num_reqs x this). Above 1, the FULL uniform-decode graphs sit on the capture sizes "
        "rounded up to multiples of it (see capture_sizes), so uniform-decode batches pad to whole requests "
        "and replay FULL graphs up to max_num_reqs requests; the capture sizes themselves are not changed.",
    )
    seq_len_buckets: Optional[tuple[PositiveInt, ...]] = Field(
        None,
        description="Optional second key axis: a sequence length is padded up to the smallest bucket; "
        "longer sequences run eagerly. Unset, the sequence length is not part of any graph key (a batch "
        "given one replays the graph of its size). At most 4096 buckets.",
    )
    num_warmups: StrictInt = Field(
        1, ge=0, le=MAX_WARMUPS,
        description=f"Eager runs before each capture (compilation, plan caches, pools); at most {MAX_WARMUPS}.",
    )
    max_cached_graphs: Optional[StrictInt] = Field(
        None, ge=1, le=MAX_INT, description="Most graphs held at once per function; None means unbounded."
    )
    memory_budget: Annotated[
        Optional[int],
        WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}, {"type": "null"}]}),
    ] = Field(
        None,
        description="Most bytes the graphs of one function may hold (e.g. \"2GiB\", \"1.5 GB\", \"512MB\" "
        "or an int of bytes); cold graphs are evicted to stay under it. A size must come to whole bytes "
        "(\"1.9 B\" is an error, not rounded). None means unbounded.",
    )
    eviction: Literal["lru", "lfu", "benefit"] = Field(
        "lru", description="Which graph to evict first: least recently used (lru), least frequently used (lfu), or "
        "benefit: the smallest expected saving (per byte under memory_budget), from measured eager, replay "
        "(replay_timing_every or time_replays) and capture times.",
    )
    min_replays_to_keep: StrictInt = Field(
        0, ge=0, le=MAX_INT,
        description="Graphs with at least this many replays are evicted only when no colder graph is left "
        "(0: no protection).",
    )
    capture_after: StrictInt = Field(
        1, ge=1, le=MAX_INT,
        description="Capture a key once it has been seen this many times; until then it runs eagerly.",
    )
    pad_value: Union[int, float] = Field(0, description="Value written into the padding rows of static inputs.")
    pad_mode: Literal["constant", "edge"] = Field(
        "constant",
        description="How the padding rows of batched inputs are filled. constant: pad_value. edge: copies of the "
        "last real row, so a function that accepts every real row accepts the padding too (np.linalg.inv, "
        "cholesky and solve of a valid batch; log and division), at the cost of rewriting the padding on every "
        "padded call. Sums over the batch see the padding rows either way.",
    )
    output_mode: Literal["copy", "view"] = Field(
        "copy",
        description="copy: outputs are fresh arrays the caller owns. view: outputs are views into the graph's "
        "static buffers, valid until the next call of the same function.",
    )
    input_binding: Literal["auto", "copy"] = Field(
        "auto",
        description="auto: where provably safe, a call whose arrays have the captured shape (a batch of exactly "
        "a capture size), dtype and C-contiguous layout re-points the graph at the caller's arrays instead "
        "of copying them, and under output_mode=copy the graph writes straight into the fresh outputs; "
        "padded batches and everything else are copied (CUPYGRAPH_LOG=debug says why); a new constant array "
        "of the captured layout is bound instead of re-captured. copy: always copy, re-capture for new constants.",
    )
    executables_per_graph: StrictInt = Field(
        8, ge=1, le=8,
        description="input_binding=auto: a graph keeps up to this many executables, each holding one set of "
        "caller addresses, so callers cycling among up to this many buffers (a prefetch ring) re-point no node; "
        "each costs one instantiation and its device memory, once (stats: executables_made, "
        "executable_instantiate_s, executable_bytes_made); beyond it the "
        "least recently used is re-pointed. 1: one executable, re-pointed whenever the addresses change.")
    time_replays: bool = Field(
        False, description="Measure the host time of every replay (an entry's avg_replay_time_ms); off, "
        "a replay reads no clock.",
    )
    on_capture_error: Literal["fallback", "raise"] = Field(
        "fallback",
        description="When an op cannot be captured: fallback runs that key eagerly from then on (reason in "
        "the stats); raise raises CaptureError naming the op.",
    )
    capture_mode: Literal["global", "thread_local", "relaxed"] = Field(
        "relaxed",
        description="CUDA stream capture mode. relaxed (CuPy's default) lets the memory pool grow and "
        "cuFFT make plans during capture, and other threads keep working; global and thread_local "
        "make such calls fail the capture.",
    )
    gc_freeze: bool = Field(True, description="Freeze Python's garbage collector during capture.")
    debug: bool = Field(
        False, description="Check inputs, pointers and stale output views on every call; write every decision "
        "of this function (and no other's) to stderr, leaving the process's logging as it is."
    )
    min_tokens_for_graph: StrictInt = Field(
        1, ge=1, le=MAX_INT,
        description="Batches smaller than this run eagerly. Compared with the real batch size, before "
        "padding: with 4, a batch of 3 runs eagerly even where it would pad to a graph of 4 or more.",
    )
    max_tokens_for_graph: Optional[StrictInt] = Field(
        None, ge=1, le=MAX_INT,
        description="Batches larger than this run eagerly (None: up to the largest capture size). Compared "
        "with the real batch size, before padding: with 12, a batch of 10 replays the graph it pads to "
        "(16, say), a batch of 13 runs eagerly.",
    )
    prefer_piecewise: bool = Field(
        False, description="When both FULL and PIECEWISE graphs exist for a batch, replay the PIECEWISE one."
    )
    # -- measurement and profiling (issue 17) --
    replay_timing_every: StrictInt = Field(
        0, ge=0, le=MAX_INT, description="Time every Nth replay of each graph on the device (CUDA events, read without "
        "waiting) for eviction=benefit and describe(); 0: off, and replays carry no timing code.")
    nvtx: bool = Field(False, description="NVTX ranges around capture, replay, fallback and graph breaks, named by "
                       "function and key, for Nsight Systems (needs the nvtx package; CUPYGRAPH_NVTX=1 also turns "
                       "them on).")
    backend: Literal["auto", "cupy", "host"] = Field(
        "auto",
        description="auto: CuPy stream capture where a GPU is usable, else the NumPy host backend; "
        "cupy or host force one.",
    )

    pdl: Literal["auto", "off"] = Field("auto", description="Programmatic dependent launch (sm_90+). auto: an edge "
        "between two kernels becomes programmatic when the consumer, built with cupy.RawKernel/RawModule/"
        "ElementwiseKernel or cupygraph.pdl_kernel/pdl_module, executes griddepcontrol.wait (CUPYGRAPH_PDL_WAIT()) "
        "before touching memory, as a scan of its PTX shows; other edges stay. off: plain edges.")
    host_uploads: HostUploads = HOST_UPLOADS  # issue 20 (config/uploads.py documents it)
    route_library_calls: bool = Field(
        True, description="While a function is warmed up and captured, run CuPy's calls that CUDA graphs "
        "cannot hold (x @ W, cupy.linalg, legacy cupy.random, ...) through cupygraph's capture-safe "
        "implementations (docs/ROUTING.md); off, they make the key run eagerly as before. "
        "CUPYGRAPH_ROUTE_LIBRARY_CALLS=0 turns it off in the whole process.")

    _sizes: tuple[int, ...] = PrivateAttr(default=())

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, fields=type(self).model_fields)) from None

    # Without this pydantic routes model_validate through __init__, whose ConfigError would come back
    # wrapped as one model-level error: file names and YAML line numbers of load_config get lost.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # pydantic's flag on the function

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # pydantic's and this class's private state, set while validating
            super().__setattr__(name, value)
            return
        raise dataclasses.FrozenInstanceError(
            f"CUDAGraphConfig is immutable: cannot set {name!r}; derive a new config with "
            f"config.replace({name}=...)"
        )

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"CUDAGraphConfig is immutable: cannot delete {name!r}")

    _ints_from_numpy = field_validator(
        "max_capture_size", "max_num_reqs", "uniform_decode_query_len", "num_warmups", "max_cached_graphs",
        "min_replays_to_keep", "capture_after", "min_tokens_for_graph", "max_tokens_for_graph",
        "replay_timing_every", mode="before",
    )(integral_to_int)
    _switches = field_validator("time_replays", "gc_freeze", "debug", "prefer_piecewise", "nvtx",
                                "route_library_calls",
                                mode="before")(as_bool)

    @field_validator("eviction", "output_mode", "on_capture_error", "input_binding", "capture_mode", "backend", "pdl",
                     "host_uploads", "pad_mode", mode="before")
    @classmethod
    def _one_of(cls, value: Any, info: ValidationInfo) -> Any:
        """A choice field, in any case; its choices are its ``Literal``'s (listed once, in the annotation)."""
        name = str(info.field_name)
        return choice(name, get_args(cls.model_fields[name].annotation))(value)

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: Any) -> CUDAGraphMode:
        return CUDAGraphMode.parse(value)

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _parse_budget(cls, value: Any) -> Optional[int]:
        return parse_byte_size(value)

    _check_sizes = field_validator("capture_sizes", "seq_len_buckets", mode="before")(rules.check_size_list)

    @field_validator("capture_sizes", "seq_len_buckets", mode="after")
    @classmethod
    def _sort_sizes(cls, value: Optional[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
        return None if value is None else tuple(sorted(set(value)))

    @field_validator("pad_value", mode="before")
    @classmethod
    def _check_pad(cls, value: Any) -> Any:
        return as_number(value)

    # Rules across fields are checked on the later field, so a file's error names that field and
    # its line.
    _check_max_capture_size = field_validator("max_capture_size", mode="after")(rules.check_max_capture_size)
    _check_decode_graphs = field_validator("uniform_decode_query_len", mode="after")(rules.check_decode_graphs)
    _check_min_tokens = field_validator("min_tokens_for_graph", mode="after")(rules.check_min_tokens)
    _check_max_tokens = field_validator("max_tokens_for_graph", mode="after")(rules.check_max_tokens)

    def model_post_init(self, context: Any, /) -> None:
        """Resolve the derived values once, while the config is being made (it is frozen after)."""
        if self.max_capture_size is None:
            # An explicit null means "derive it", as if left out: replace() derives it again.
            self.model_fields_set.discard("max_capture_size")
        largest, sizes = resolve_capture_sizes(
            self.capture_sizes, self.max_capture_size, self.max_num_reqs, self.uniform_decode_query_len
        )
        # The one field a config derives: it reads as the resolved value (to_dict round-trips).
        object.__setattr__(self, "max_capture_size", largest)
        self._sizes = () if self.mode is CUDAGraphMode.NONE else tuple(sizes)

    # -- deriving configs ----------------------------------------------------------------------

    def replace(self, **changes: Any) -> CUDAGraphConfig:
        """A new, validated config: the fields this one was given, updated with ``changes``.

        Fields this config derived (``max_capture_size`` from ``capture_sizes``) are derived
        again, so ``replace(capture_sizes=[1, 2])`` gives a largest size of 2. Errors raise
        ``ConfigError`` naming the field.
        """
        data = {name: getattr(self, name) for name in self.model_fields_set}
        data.update(changes)
        return type(self).from_dict(data)

    def model_copy(self, *, update: Optional[Mapping[str, Any]] = None, deep: bool = False) -> CUDAGraphConfig:
        """Pydantic's copy, validated: ``update`` goes through ``replace`` (pydantic would skip validation)."""
        if update:
            return self.replace(**update)
        return super().model_copy(deep=deep)

    # -- derived values ------------------------------------------------------------------------

    @property
    def cudagraph_capture_sizes(self) -> tuple[int, ...]:
        """The resolved, sorted capture sizes (empty under mode NONE): ``capture_sizes`` as given, or
        the defaults. Mixed batches and PIECEWISE graphs pad to them; FULL uniform-decode graphs
        sit on them rounded up to multiples of ``uniform_decode_query_len`` (see ``capture_sizes``;
        ``cupygraph.dispatch.decision.capture_ladders(config)`` lists each mode's)."""
        return self._sizes

    @property
    def largest_capture_size(self) -> Optional[int]:
        """The largest capture size: no graph of any mode is larger (None under mode NONE)."""
        return self._sizes[-1] if self._sizes else None

    def get_padded_batch_size(
        self, batch_size: int, *, num_reqs: Optional[int] = None, uniform_decode: bool = False,
    ) -> Optional[int]:
        """The size a batch of ``batch_size`` real rows pads to when it is graphed: the smallest
        capture size >= it, or None above the largest.

        A uniform-decode batch (``uniform_decode=True``: ``num_reqs`` requests of
        ``uniform_decode_query_len`` tokens) may replay a FULL graph of its own ladder instead (the
        capture sizes rounded up to multiples of the query length): then its size is the one the
        decision picks, as ``should_use_cudagraph`` asks it. Whether a batch is graphed at all
        (mode, token limits, buckets) is ``should_use_cudagraph``'s answer.
        """
        size = check_positive_int(batch_size, "batch_size")
        if not isinstance(uniform_decode, bool):
            raise TypeError(f"uniform_decode must be a bool, got {type(uniform_decode).__name__} {uniform_decode!r}")
        _, padded_batch_size = _installed()  # the one decision's answer (dispatch/decision.py), not a second one
        return padded_batch_size(self, size, num_reqs=num_reqs, uniform_decode=uniform_decode)

    def get_padded_seq_len(self, seq_len: Optional[int]) -> Optional[int]:
        """``seq_len`` padded to its bucket; unchanged without buckets (and then not part of any
        graph key); None when above the largest bucket."""
        if seq_len is None:
            return None
        seq_len = check_positive_int(seq_len, "seq_len")
        return seq_len if self.seq_len_buckets is None else pad_to_capture_size(seq_len, self.seq_len_buckets)

    def should_use_cudagraph(
        self, batch_size: int, seq_len: Optional[int] = None, *,
        num_reqs: Optional[int] = None, uniform_decode: bool = False,
    ) -> bool:
        """True when a batch of this real size (and sequence length) would replay a graph.

        The answer of ``decide`` with the keys and default policy this config describes (what a
        dispatcher made from it decides): the mode, capture sizes, seq_len buckets and the token
        limits, which bound the real batch size. An empty batch (0) runs eagerly.
        """
        decide_batch_size, _ = _installed()
        decision = decide_batch_size(self, batch_size, seq_len, num_reqs=num_reqs, uniform_decode=uniform_decode)
        return bool(decision.graphed)

    # -- conversions -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain data (mode by name) that ``from_dict`` and the config files accept back."""
        data = self.model_dump(mode="json")
        data["mode"] = self.mode.name
        return data

    @classmethod
    def from_dict(cls, data: Any, *, source: Optional[str] = None) -> CUDAGraphConfig:
        """Validate a mapping; errors raise ``ConfigError`` naming the field (and ``source``)."""
        if not isinstance(data, dict):
            where = f"{source}: " if source else ""
            raise ConfigError(f"{where}expected a mapping of config fields, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, source=source, fields=cls.model_fields)) from None

    @classmethod
    def disabled(cls) -> CUDAGraphConfig:
        """A config under which every front door runs eagerly."""
        return cls(mode=CUDAGraphMode.NONE)
