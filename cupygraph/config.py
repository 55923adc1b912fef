"""CUDA graph modes and the validated ``CUDAGraphConfig``.

This module imports nothing else from cupygraph except the errors, the mode enum (``modes.py``,
re-exported here) and the size helpers, so every layer can use it; loading from files lives in
``config_files.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from .config_values import ConfigInt, PositiveInt, as_number, as_size_list, choice, parse_byte_size
from .errors import ConfigError
from .modes import CUDAGraphMode, short_repr
from .sizes import default_capture_sizes, pad_to_capture_size

__all__ = [
    "CUDAGraphConfig",
    "CUDAGraphMode",
    "apply_env_overrides",
    "default_config",
    "field_path",
    "format_validation_error",
    "graphs_disabled_by_env",
    "parse_byte_size",
    "set_default_config",
]

logger = logging.getLogger("cupygraph")


MAX_WARMUPS = 1000
"""Most eager warm-up runs before a capture (a larger count is a typo that would stall the capture)."""

MAX_LIST_LENGTH = 4096
"""Most entries in capture_sizes or seq_len_buckets: each capture size is a graph (the default list
up to 65536 has 4 080), so a longer list is a mistake that would take hours to capture."""

MAX_DEFAULT_CAPTURE_SIZE = 1 << 16
"""Largest max_capture_size without explicit capture_sizes (the default list then has 4 080 sizes)."""



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
        "whole-function graphs for uniform-decode batches.",
        json_schema_extra={"default": "FULL"},
    )
    capture_sizes: Optional[tuple[PositiveInt, ...]] = Field(
        None,
        description="Batch sizes to capture graphs for. Unset: [1, 2, 4] + 8..248 step 8 + 256.."
        "max_capture_size step 16. Given sizes are de-duplicated and sorted; at most 4096 of them.",
    )
    max_capture_size: ConfigInt = Field(
        512, ge=1,
        description="Largest batch size captured; larger batches run eagerly and count as fallbacks. "
        "Defaults to the largest of capture_sizes when only those are given; at most 65536 when "
        "capture_sizes is unset.",
    )
    max_num_reqs: Optional[ConfigInt] = Field(
        None, ge=1, description="Largest number of requests in a batch; decode sizes above it are not captured."
    )
    uniform_decode_query_len: ConfigInt = Field(
        1, ge=1, description="Tokens per request in a uniform-decode batch (num_tokens == num_reqs * this)."
    )
    seq_len_buckets: Optional[tuple[PositiveInt, ...]] = Field(
        None,
        description="Optional second key axis: a sequence length is padded up to the smallest bucket; "
        "longer sequences run eagerly. At most 4096 buckets.",
    )
    num_warmups: ConfigInt = Field(
        1, ge=0, le=MAX_WARMUPS,
        description=f"Eager runs before each capture (compilation, plan caches, pools); at most {MAX_WARMUPS}.",
    )
    max_cached_graphs: Optional[ConfigInt] = Field(
        None, ge=1, description="Most graphs held at once per function; None means unbounded."
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
    eviction: Literal["lru", "lfu"] = Field(
        "lru", description="Which graph to evict first: least recently used (lru) or least frequently used (lfu)."
    )
    min_replays_to_keep: ConfigInt = Field(
        0, ge=0,
        description="Graphs with at least this many replays are evicted only when no colder graph is left "
        "(0: no protection).",
    )
    capture_after: ConfigInt = Field(
        1, ge=1, description="Capture a key once it has been seen this many times; until then it runs eagerly."
    )
    pad_value: Union[int, float] = Field(0, description="Value written into the padding rows of static inputs.")
    output_mode: Literal["copy", "view"] = Field(
        "copy",
        description="copy: outputs are fresh arrays the caller owns. view: outputs are views into the graph's "
        "static buffers, valid until the next call of the same function.",
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
        False, description="Check inputs, pointers and stale output views on every call; log every decision."
    )
    min_tokens_for_graph: ConfigInt = Field(1, ge=1, description="Batches smaller than this run eagerly.")
    max_tokens_for_graph: Optional[ConfigInt] = Field(
        None, ge=1, description="Batches larger than this run eagerly (None: up to max_capture_size)."
    )
    prefer_piecewise: bool = Field(
        False, description="When both FULL and PIECEWISE graphs exist for a batch, replay the PIECEWISE one."
    )
    backend: Literal["auto", "cupy", "host"] = Field(
        "auto",
        description="auto: CuPy stream capture where a GPU is usable, else the NumPy host backend; "
        "cupy or host force one.",
    )

    _sizes: tuple[int, ...] = PrivateAttr(default=())

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err)) from None

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

    _check_eviction = field_validator("eviction", mode="before")(choice("eviction", ("lru", "lfu")))
    _check_output = field_validator("output_mode", mode="before")(choice("output_mode", ("copy", "view")))
    _check_on_error = field_validator("on_capture_error", mode="before")(
        choice("on_capture_error", ("fallback", "raise"))
    )
    _check_capture_mode = field_validator("capture_mode", mode="before")(
        choice("capture_mode", ("global", "thread_local", "relaxed"))
    )
    _check_backend = field_validator("backend", mode="before")(choice("backend", ("auto", "cupy", "host")))

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: Any) -> CUDAGraphMode:
        return CUDAGraphMode.parse(value)

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _parse_budget(cls, value: Any) -> Optional[int]:
        return parse_byte_size(value)

    @field_validator("capture_sizes", "seq_len_buckets", mode="before")
    @classmethod
    def _check_sizes(cls, value: Any) -> Any:
        sizes = as_size_list(value)
        if sizes is not None and not sizes:
            # An empty list would silently run every batch eagerly.
            raise ValueError("the list is empty; leave the field out for the defaults (or set mode: NONE)")
        if sizes is not None and len(sizes) > MAX_LIST_LENGTH:
            raise ValueError(f"the list has {len(sizes)} entries; at most {MAX_LIST_LENGTH} are allowed (the limit)")
        return sizes

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
    @field_validator("max_capture_size", mode="after")
    @classmethod
    def _check_max_capture_size(cls, value: int, info: ValidationInfo) -> int:
        sizes = info.data.get("capture_sizes")
        if sizes and sizes[-1] > value:
            raise ValueError(_above_max_message(sizes[-1], value))
        if sizes is None and value > MAX_DEFAULT_CAPTURE_SIZE:
            count = len(default_capture_sizes(MAX_DEFAULT_CAPTURE_SIZE)) + (value - MAX_DEFAULT_CAPTURE_SIZE) // 16
            raise ValueError(
                f"without capture_sizes, max_capture_size={value} means about {count} default capture sizes "
                f"(a graph each); the defaults go up to {MAX_DEFAULT_CAPTURE_SIZE}: list capture_sizes for "
                f"larger batches"
            )
        return value

    @field_validator("min_tokens_for_graph", mode="after")
    @classmethod
    def _check_min_tokens(cls, value: int, info: ValidationInfo) -> int:
        mode, sizes = info.data.get("mode"), info.data.get("capture_sizes")
        largest = info.data.get("max_capture_size")
        if mode is CUDAGraphMode.NONE or largest is None:
            return value
        largest = sizes[-1] if sizes else default_capture_sizes(largest)[-1]
        if value > largest:
            raise ValueError(
                f"min_tokens_for_graph={value} is above the largest capture size {largest}: no batch would "
                f"replay a graph; lower it (or set mode: NONE to run eagerly)"
            )
        return value

    @field_validator("max_tokens_for_graph", mode="after")
    @classmethod
    def _check_max_tokens(cls, value: Optional[int], info: ValidationInfo) -> Optional[int]:
        low = info.data.get("min_tokens_for_graph")
        if value is not None and low is not None and value < low:
            raise ValueError(_tokens_message(value, low))
        return value

    def model_post_init(self, context: Any, /) -> None:
        """Resolve the derived values once, while the config is being made (it is frozen after)."""
        sizes = self.capture_sizes
        if sizes and "max_capture_size" not in self.model_fields_set:
            # Only sizes given: they define the largest size, so keep the two fields consistent.
            object.__setattr__(self, "max_capture_size", sizes[-1])
        if self.mode is CUDAGraphMode.NONE:
            self._sizes = ()
        elif sizes is None:
            self._sizes = tuple(default_capture_sizes(self.max_capture_size))
        else:
            self._sizes = sizes

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
        """The resolved, sorted batch sizes graphs are captured for (empty under mode NONE)."""
        return self._sizes

    @property
    def largest_capture_size(self) -> Optional[int]:
        return self._sizes[-1] if self._sizes else None

    def get_padded_batch_size(self, batch_size: int) -> Optional[int]:
        """The smallest capture size >= ``batch_size``, or None above the largest (runs eagerly)."""
        return pad_to_capture_size(batch_size, self._sizes)

    def get_padded_seq_len(self, seq_len: Optional[int]) -> Optional[int]:
        """``seq_len`` padded to its bucket; unchanged without buckets; None when above the largest."""
        if seq_len is None or self.seq_len_buckets is None:
            return seq_len
        return pad_to_capture_size(seq_len, self.seq_len_buckets)

    def should_use_cudagraph(self, batch_size: int, seq_len: Optional[int] = None) -> bool:
        """True when a batch of this size (and sequence length) would replay a graph."""
        if not self.mode.has_graphs() or batch_size < self.min_tokens_for_graph:
            return False
        if self.max_tokens_for_graph is not None and batch_size > self.max_tokens_for_graph:
            return False
        if self.get_padded_batch_size(batch_size) is None:
            return False
        return seq_len is None or self.seq_len_buckets is None or self.get_padded_seq_len(seq_len) is not None

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
            raise ConfigError(format_validation_error(err, source=source)) from None

    @classmethod
    def disabled(cls) -> CUDAGraphConfig:
        """A config under which every front door runs eagerly."""
        return cls(mode=CUDAGraphMode.NONE)

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike[str]]) -> CUDAGraphConfig:
        """Load a ``.yaml``/``.yml``/``.json``/``.toml`` file (see ``load_config``)."""
        from .config_files import load_config

        return load_config(path)

    def to_file(self, path: Union[str, os.PathLike[str]]) -> None:
        """Write this config to a file whose extension picks the format."""
        from .config_files import save_config

        save_config(self, path)


def _above_max_message(largest: int, max_capture_size: int) -> str:
    return (
        f"capture_sizes has {largest}, above max_capture_size={max_capture_size}; "
        f"raise max_capture_size or drop the larger sizes"
    )


def _tokens_message(high: int, low: int) -> str:
    return f"max_tokens_for_graph={high} is below min_tokens_for_graph={low}"


def field_path(loc: tuple[Any, ...]) -> str:
    """``("capture_sizes", 3)`` -> ``capture_sizes[3]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            part = str(part)
            if not part.isprintable() or len(part) > 80:
                part = short_repr(part)  # a key from a file: one line, bounded
            path += f".{part}" if path else part
    return path or "<config>"


def format_validation_error(
    err: ValidationError, *, source: Optional[str] = None, line_of: Any = None
) -> str:
    """One line per problem: file, line (when known), field path, bad value, what is allowed."""
    lines = []
    for problem in err.errors():
        loc = tuple(problem.get("loc", ()))
        message = problem.get("msg", "invalid value")
        if message.startswith("Value error, "):
            message = message[len("Value error, "):]
        if problem.get("type") == "extra_forbidden":
            message = (
                f"unknown field; valid fields: {', '.join(CUDAGraphConfig.model_fields)}"
            )
        where = source or "config"
        line = line_of(loc) if line_of is not None else None
        if line is not None:
            where += f":{line}"
        if not loc:
            # A rule across fields: its message names the fields and values itself.
            lines.append(f"{where}: {message}")
            continue
        shown = "" if problem.get("type") == "extra_forbidden" or "input" not in problem else (
            f" (got {short_repr(problem['input'])})"
        )
        lines.append(f"{where}: field '{field_path(loc)}': {message}{shown}")
    return "\n".join(lines)


_DISABLE_LOGGED = False
_DEFAULT_CONFIG: Optional[CUDAGraphConfig] = None


def set_default_config(config: Optional[CUDAGraphConfig]) -> Optional[CUDAGraphConfig]:
    """Make ``config`` what front doors use when given none (``None`` restores the defaults).

    Returns the previous default, so a caller (the pytest plugin's ``--cupygraph-config``, a test)
    can put it back when done.
    """
    global _DEFAULT_CONFIG
    if config is not None and not isinstance(config, CUDAGraphConfig):
        raise TypeError(f"set_default_config needs a CUDAGraphConfig or None, got {type(config).__name__}")
    previous, _DEFAULT_CONFIG = _DEFAULT_CONFIG, config
    return previous


def default_config() -> CUDAGraphConfig:
    """The config front doors use when given none (configs are immutable, so it is shared)."""
    return _DEFAULT_CONFIG if _DEFAULT_CONFIG is not None else CUDAGraphConfig()


def graphs_disabled_by_env() -> bool:
    """``CUPYGRAPH_DISABLE=1`` makes every front door run eagerly; logged once per process."""
    global _DISABLE_LOGGED
    disabled = os.environ.get("CUPYGRAPH_DISABLE", "").strip().lower() not in ("", "0", "false", "no", "off")
    if disabled and not _DISABLE_LOGGED:
        _DISABLE_LOGGED = True
        logger.warning("CUPYGRAPH_DISABLE is set: every cupygraph front door runs eagerly (mode NONE)")
    return disabled


def apply_env_overrides(config: CUDAGraphConfig) -> CUDAGraphConfig:
    """``config`` as front doors run it: under ``CUPYGRAPH_DISABLE`` the same config in mode NONE."""
    if graphs_disabled_by_env() and config.mode is not CUDAGraphMode.NONE:
        return config.replace(mode=CUDAGraphMode.NONE)
    return config
