"""Every config field is strict in the same way, whatever the source (Python, YAML, JSON, TOML):
an integer is an integer within a bound, a switch is a bool, and the error names the field.

The fields are found from the JSON schema, so a field added later is held to the same rules.
"""

from __future__ import annotations

import numpy as np
import pytest

from cupygraph.cli import main as cli_main
from cupygraph.config.model import CUDAGraphConfig
from cupygraph.config.values import MAX_BYTES, MAX_INT
from cupygraph.errors import ConfigError

SCHEMA = CUDAGraphConfig.model_json_schema()


def _types(prop: dict) -> set:
    return {p.get("type") for p in prop.get("anyOf", [prop])}


INT_FIELDS = sorted(name for name, prop in SCHEMA["properties"].items() if _types(prop) - {"null"} == {"integer"})
LIST_FIELDS = sorted(name for name, prop in SCHEMA["properties"].items() if _types(prop) - {"null"} == {"array"})
BOOL_FIELDS = sorted(name for name, prop in SCHEMA["properties"].items() if _types(prop) == {"boolean"})


def refused(**fields) -> str:
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(**fields)
    return str(info.value)


def test_the_fields_were_found():
    assert {"max_capture_size", "num_warmups", "capture_after"} <= set(INT_FIELDS)
    assert set(LIST_FIELDS) == {"capture_sizes", "seq_len_buckets"}
    assert {"debug", "gc_freeze", "nvtx"} <= set(BOOL_FIELDS)


@pytest.mark.parametrize("name", INT_FIELDS + LIST_FIELDS)
def test_every_integer_has_an_upper_bound_in_the_schema(name):
    prop = SCHEMA["properties"][name]
    ints = [p for p in prop.get("anyOf", [prop]) if p.get("type") in ("integer", "array")]
    bound = ints[0]["items"] if ints[0]["type"] == "array" else ints[0]
    assert 0 < bound.get("maximum", 0) <= MAX_INT, prop


@pytest.mark.parametrize("name", INT_FIELDS)
@pytest.mark.parametrize("value", [MAX_INT + 1, 10**20, 1e20, 2.0, "8"])
def test_an_integer_field_refuses_huge_float_and_string_values_naming_the_field(name, value):
    assert f"field '{name}'" in refused(**{name: value})


@pytest.mark.parametrize("name", LIST_FIELDS)
@pytest.mark.parametrize("value", [MAX_INT + 1, 10**20, 1e20])
def test_a_size_list_refuses_a_huge_or_float_entry_naming_its_index(name, value):
    message = refused(**{name: [1, value]})
    assert f"field '{name}[1]'" in message, message


def test_a_size_beyond_32_bits_says_why():
    # Regression (issue 27): `capture_sizes: [1, 1e20]` and sizes past any launchable batch validated.
    message = refused(capture_sizes=[1, 10**20])
    assert "2147483647" in message and "32-bit" in message, message


def test_the_largest_size_allowed_is_accepted():
    assert CUDAGraphConfig(capture_sizes=[1, MAX_INT]).largest_capture_size == MAX_INT


@pytest.mark.parametrize("name", BOOL_FIELDS)
@pytest.mark.parametrize("value", ["true", "false", "yes", 1, 0, None])
def test_a_switch_accepts_only_a_bool(name, value):
    # Regression (issue 27): `debug: "true"` validated (pydantic's lax bool reads strings and ints).
    message = refused(**{name: value})
    assert f"field '{name}'" in message and "true or false" in message, message


@pytest.mark.parametrize("name", BOOL_FIELDS)
def test_a_switch_takes_python_and_numpy_bools(name):
    default = CUDAGraphConfig.model_fields[name].default
    for value in (not default, np.bool_(not default)):
        got = getattr(CUDAGraphConfig(**{name: value}), name)
        assert got is (not default)


def test_a_memory_budget_beyond_64_bits_is_refused():
    assert "field 'memory_budget'" in refused(memory_budget=MAX_BYTES + 1)
    assert "field 'memory_budget'" in refused(memory_budget="100000000 TiB")
    assert CUDAGraphConfig(memory_budget=MAX_BYTES).memory_budget == MAX_BYTES


@pytest.mark.parametrize("name, text, field", [
    ("sizes.yaml", "capture_sizes: [1, 100000000000000000000]\n", "capture_sizes[1]"),
    ("sizes.json", '{"capture_sizes": [1, 1e20]}\n', "capture_sizes[1]"),
    ("sizes.toml", "capture_sizes = [1, 1e20]\n", "capture_sizes[1]"),
    ("debug.yaml", 'debug: "true"\n', "debug"),
    ("debug.json", '{"debug": 1}\n', "debug"),
    ("debug.toml", 'debug = "true"\n', "debug"),
])
def test_validate_refuses_each_format_naming_file_line_and_field(tmp_path, capsys, name, text, field):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert cli_main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1: field '{field}'" in err and "Traceback" not in err, err
