"""Reading and writing ``CUDAGraphConfig`` files (YAML, JSON, TOML) with errors that name the place.

Every failure is a ``ConfigError`` whose message starts with the file (and, for YAML, the line),
never a traceback from inside a parser.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from pydantic import ValidationError

from ..errors import ConfigError
from .model import CUDAGraphConfig, format_validation_error
from .modes import short_repr

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

# A config is a few dozen lines; anything far larger is a mistake (or an attack) and is refused
# before it is parsed, so a huge file costs nothing.
MAX_CONFIG_BYTES = 1 << 20

# A config is a mapping whose values are at most lists: two levels. Deeper nesting is refused
# before the parsers recurse into it (they recurse per level and would hit Python's recursion
# limit slowly, or crash); 8 leaves room for a clear field error on a value nested by mistake.
MAX_NESTING_DEPTH = 8

SUFFIXES = (".yaml", ".yml", ".json", ".toml")

PathLike = Union[str, "os.PathLike[str]"]


class _TooDeep(Exception):
    """Values nested deeper than ``MAX_NESTING_DEPTH``, found at ``line`` (1-based; 0: unknown)."""

    def __init__(self, line: int = 0):
        super().__init__(line)
        self.line = line


# Strings and comments are skipped, so brackets inside them do not count as nesting.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_TOML_TOKENS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]'
)


def _check_bracket_depth(text: str, tokens: re.Pattern[str]) -> None:
    """Raise ``_TooDeep`` at the first bracket or brace that opens level ``MAX_NESTING_DEPTH + 1``."""
    depth = 0
    for token in tokens.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                raise _TooDeep(text.count("\n", 0, token.start()) + 1)
        elif char in "]}":
            depth = max(depth - 1, 0)


def _check_data_depth(data: Any, line_of: Callable[[tuple[Any, ...]], Optional[int]]) -> None:
    """The same limit on parsed data (TOML's dotted keys nest tables without brackets); no recursion."""
    if not isinstance(data, dict):
        return
    stack: list[tuple[Any, int, Any]] = [(value, 2, key) for key, value in data.items()]
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_NESTING_DEPTH:
                raise _TooDeep(line_of((field,)) or 0)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1, field) for item in items)


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases (a config never needs them, and alias bombs exist)
    and keys given twice (PyYAML would silently keep the last one)."""

    _depth = 0

    def compose_node(self, parent: Optional[yaml.Node], index: int) -> Optional[yaml.Node]:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it unannotated
            raise yaml.composer.ComposerError(
                None, None,
                f"YAML aliases (*{event.anchor}) are not allowed in cupygraph config files; write the value out",
                event.start_mark,
            )
        nested = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if nested and self._depth >= MAX_NESTING_DEPTH:
            raise _TooDeep(self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
        self._depth += nested
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= nested

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]` or `{a: 1}: 2`: no field is named so
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a field name, got a {kind}", key_node.start_mark,
                )
            key = key_node.value
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} is given twice (first on line {seen[key]}); a config lists each field once",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {key!r} is given twice; a config lists each field once")
        data[key] = value
    return data


def _json_duplicate_place(path: Path, text: str, message: str) -> str:
    """``path:line`` of the second occurrence of the duplicated key named in ``message``."""
    key = re.search(r"key '(.*)' is given twice", message)
    if key:
        hits = list(re.finditer(rf'"{re.escape(key.group(1))}"\s*:', text))
        if len(hits) > 1:
            return f"{path}:{text.count(chr(10), 0, hits[1].start()) + 1}"
    return str(path)


def _text_line_finder(text: str, suffix: str) -> Callable[[tuple[Any, ...]], Optional[int]]:
    """For JSON and TOML, the line where a top-level field is written (first occurrence)."""
    lines = text.splitlines()

    def line_of(loc: tuple[Any, ...]) -> Optional[int]:
        if not loc or not isinstance(loc[0], str):
            return None
        name = re.escape(loc[0])
        if suffix == ".json":
            pattern = re.compile(rf'"{name}"\s*:')
        else:
            pattern = re.compile(rf'^\s*(?:{name}|"{name}"|\'{name}\')\s*[=.]')  # a.b = 1 is a dotted key
        for number, line in enumerate(lines, 1):
            if pattern.search(line):
                return number
        return None

    return line_of


def _yaml_line_finder(root: Optional[yaml.Node]) -> Callable[[tuple[Any, ...]], Optional[int]]:
    """A function mapping a pydantic error location to the 1-based YAML line it came from."""

    def line_of(loc: tuple[Any, ...]) -> Optional[int]:
        node = root
        line = None if node is None else node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == part or key_node.value == str(part):
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


def read_text_file(path: Path, kind: str = "config file", limit: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of the user's file ``path`` (a ``kind`` such as "config file", at most ``limit``
    bytes); every problem (missing, a directory, unreadable, binary) a ``ConfigError`` naming it."""
    try:
        if not path.exists():
            raise ConfigError(f"{path}: {kind} not found")
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a regular file; give the path of the {kind}")
        if not path.is_file():
            raise ConfigError(f"{path}: not a regular file; give the path of the {kind}")
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"{path}: file is {size} bytes; {kind}s are limited to {limit} bytes")
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the {kind}: {err.strerror or err}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise ConfigError(
            f"{path}: the file is UTF-16 or UTF-32 (it starts with a byte order mark); save it as UTF-8"
        )
    try:
        return data.decode("utf-8-sig")  # a UTF-8 byte order mark (some editors write one) is fine
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"{path}:{line}: not valid UTF-8 text (byte {err.start}); a {kind} is text: save the file as UTF-8"
        ) from None


def _parse(path: Path, text: str) -> tuple[Any, Callable[[tuple[Any, ...]], Optional[int]]]:
    try:
        suffix = path.suffix.lower()
        if suffix == ".json":
            _check_bracket_depth(text, _JSON_TOKENS)
        elif suffix == ".toml":
            _check_bracket_depth(text, _TOML_TOKENS)
        data, line_of = _parse_format(path, text)
        _check_data_depth(data, line_of)
        return data, line_of
    except _TooDeep as err:
        where = f"{path}:{err.line}" if err.line else str(path)
        raise ConfigError(f"{where}: {_too_deep_message()}") from None
    except RecursionError:  # a backstop: the limits above stop nesting long before this
        raise ConfigError(f"{path}: {_too_deep_message()}") from None


def _too_deep_message() -> str:
    return (
        f"values are nested too deeply: more than {MAX_NESTING_DEPTH} levels (the limit); a config is a "
        f"mapping of fields whose values are numbers, names or lists"
    )


def _parse_format(path: Path, text: str) -> tuple[Any, Callable[[tuple[Any, ...]], Optional[int]]]:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            root = yaml.compose(text, Loader=_NoAliasLoader)
            data = yaml.load(text, Loader=_NoAliasLoader) if root is not None else None
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            raise ConfigError(f"{where}: invalid YAML: {err.problem or err}") from None
        except yaml.reader.ReaderError as err:  # a character YAML does not allow (NUL, ...)
            line = text.count("\n", 0, err.position) + 1
            code = err.character if isinstance(err.character, int) else ord(err.character)
            raise ConfigError(
                f"{path}:{line}: invalid YAML: character U+{code:04X} at position {err.position} is not "
                f"allowed in YAML"
            ) from None
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: invalid YAML: {err}") from None
        return data, _yaml_line_finder(root)
    if suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_json_object), _text_line_finder(text, suffix)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
        except ValueError as err:  # a key given twice (from _json_object)
            raise ConfigError(f"{_json_duplicate_place(path, text, str(err))}: invalid JSON: {err}") from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text), _text_line_finder(text, suffix)
        except tomllib.TOMLDecodeError as err:
            found = re.search(r"\(at line (\d+)", str(err))
            if found is None and "end of document" in str(err):
                found = re.match(r"(\d+)", str(len(text.splitlines()) or 1))
            where = f"{path}:{found.group(1)}" if found else str(path)
            raise ConfigError(f"{where}: invalid TOML: {err}") from None
    raise ConfigError(
        f"{path}: unknown config file extension {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}"
    )


def _first_content_line(text: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            return number
    return 1


def _config_path(path: Any, caller: str) -> Path:
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise TypeError(f"{caller}: path must be a config file's path (a str or os.PathLike), "
                        f"got {type(path).__name__} {short_repr(path)}")
    return Path(path)


def load_config(path: PathLike) -> CUDAGraphConfig:
    """Load and validate a config file; any problem raises ``ConfigError`` naming file, field, line."""
    path = _config_path(path, "load_config")
    text = read_text_file(path)
    if not text.strip():
        raise ConfigError(f"{path}: config file is empty; write at least one field, e.g. 'mode: FULL'")
    data, line_of = _parse(path, text)
    if data is None:
        raise ConfigError(f"{path}: config file holds no settings (only comments or null)")
    if not isinstance(data, dict):
        line = line_of(()) or _first_content_line(text)
        raise ConfigError(
            f"{path}:{line}: the top level must be a mapping of field: value, got a {type(data).__name__}"
        )
    try:
        return CUDAGraphConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            format_validation_error(err, source=str(path), line_of=line_of, fields=CUDAGraphConfig.model_fields)
        ) from None


def save_config(config: CUDAGraphConfig, path: PathLike) -> None:
    """Write ``config`` in the format its extension names (fields left at None are omitted)."""
    path = _config_path(path, "save_config")
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
