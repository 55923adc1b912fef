"""Reading and writing ``CUDAGraphConfig`` files (YAML, JSON, TOML) with errors that name the place.

Every failure is a ``ConfigError`` whose message starts with the file (and, for YAML, the line),
never a traceback from inside a parser.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Union

import yaml
from pydantic import ValidationError

from .config import CUDAGraphConfig, format_validation_error
from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

# A config is a few dozen lines; anything far larger is a mistake (or an attack) and is refused
# before it is parsed, so a huge file costs nothing.
MAX_CONFIG_BYTES = 1 << 20

SUFFIXES = (".yaml", ".yml", ".json", ".toml")

PathLike = Union[str, "os.PathLike[str]"]


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases: a config never needs them, and alias bombs exist."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed "
                "in cupygraph config files; write the value out"
            )
        return super().compose_node(parent, index)


def _yaml_line_finder(root: Optional[yaml.Node]) -> Callable[[tuple[Any, ...]], Optional[int]]:
    """A function mapping a pydantic error location to the 1-based YAML line it came from."""

    def line_of(loc: tuple[Any, ...]) -> Optional[int]:
        node = root
        line = None if node is None else node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == part:
                        line = key_node.start_mark.line + 1
                        node = value_node
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    return line_of


def _read_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: file is {size} bytes; config files are limited to {MAX_CONFIG_BYTES} bytes"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not valid UTF-8 text (byte {err.start}); save the file as UTF-8") from None


def _parse(path: Path, text: str) -> tuple[Any, Callable[[tuple[Any, ...]], Optional[int]]]:
    suffix = path.suffix.lower()
    no_lines: Callable[[tuple[Any, ...]], Optional[int]] = lambda loc: None
    if suffix in (".yaml", ".yml"):
        try:
            root = yaml.compose(text, Loader=_NoAliasLoader)
            data = yaml.load(text, Loader=_NoAliasLoader) if root is not None else None
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            raise ConfigError(f"{where}: invalid YAML: {err.problem or err}") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: invalid YAML: {err}") from None
        return data, _yaml_line_finder(root)
    if suffix == ".json":
        try:
            return json.loads(text), no_lines
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text), no_lines
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: invalid TOML: {err}") from None
    raise ConfigError(
        f"{path}: unknown config file extension {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}"
    )


def load_config(path: PathLike) -> CUDAGraphConfig:
    """Load and validate a config file; any problem raises ``ConfigError`` naming file, field, line."""
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        raise ConfigError(f"{path}: config file is empty; write at least one field, e.g. 'mode: FULL'")
    data, line_of = _parse(path, text)
    if data is None:
        raise ConfigError(f"{path}: config file holds no settings (only comments or null)")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of field: value, got a {type(data).__name__}"
        )
    try:
        return CUDAGraphConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source=str(path), line_of=line_of)) from None


def save_config(config: CUDAGraphConfig, path: PathLike) -> None:
    """Write ``config`` in the format its extension names (fields left at None are omitted)."""
    path = Path(path)
    data = {k: v for k, v in config.to_dict().items() if v is not None}
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(data, sort_keys=False)
    elif suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    elif suffix == ".toml":
        import tomli_w

        text = tomli_w.dumps(data)
    else:
        raise ConfigError(
            f"{path}: unknown config file extension {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}"
        )
    path.write_text(text, encoding="utf-8")
