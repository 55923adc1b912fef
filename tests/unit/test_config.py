"""CUDAGraphMode and CUDAGraphConfig: every validation rule, derived value and conversion."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import pytest
from pydantic import ValidationError

from cupygraph.config import defaults as config_defaults
from cupygraph.config.defaults import graphs_disabled_by_env
from cupygraph.config.files import load_config, save_config
from cupygraph.config.model import (
    CUDAGraphConfig,
    CUDAGraphMode,
    field_path,
    format_validation_error,
    parse_byte_size,
)
from cupygraph.config.values import pad_value_problem
from cupygraph.errors import ConfigError

M = CUDAGraphMode

VLLM_512 = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


# -- defaults and capture sizes --------------------------------------------------------------------


def test_defaults():
    c = CUDAGraphConfig()
    assert c.mode is M.FULL
    assert c.capture_sizes is None and c.max_capture_size == 512
    assert c.max_num_reqs is None and c.uniform_decode_query_len == 1
    assert c.seq_len_buckets is None and c.num_warmups == 1
    assert c.max_cached_graphs is None and c.memory_budget is None
    assert (c.eviction, c.min_replays_to_keep, c.capture_after) == ("lru", 0, 1)
    assert (c.pad_value, c.output_mode, c.on_capture_error) == (0, "copy", "fallback")
    assert (c.capture_mode, c.gc_freeze, c.debug, c.backend) == ("relaxed", True, False, "auto")
    assert (c.min_tokens_for_graph, c.max_tokens_for_graph, c.prefer_piecewise) == (1, None, False)


def test_default_sizes_for_512_are_vllms_51():
    sizes = CUDAGraphConfig().cudagraph_capture_sizes
    assert len(sizes) == 51
    assert list(sizes) == VLLM_512
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert CUDAGraphConfig().largest_capture_size == 512


@pytest.mark.parametrize(
    "max_size, last, count",
    [(1, 1, 1), (3, 2, 2), (8, 8, 4), (100, 96, 15), (248, 248, 34), (256, 256, 35), (300, 288, 37), (1024, 1024, 83)],
)
def test_default_sizes_clip_to_max_capture_size(max_size, last, count):
    sizes = CUDAGraphConfig(max_capture_size=max_size).cudagraph_capture_sizes
    assert sizes[-1] == last and len(sizes) == count
    assert all(s <= max_size for s in sizes)
    assert list(sizes) == sorted(set(sizes))


def test_explicit_sizes_are_deduplicated_and_sorted():
    c = CUDAGraphConfig(capture_sizes=[16, 4, 1, 4, 8, 1])
    assert c.capture_sizes == (1, 4, 8, 16)
    assert c.cudagraph_capture_sizes == (1, 4, 8, 16)


def test_explicit_sizes_alone_set_max_capture_size():
    c = CUDAGraphConfig(capture_sizes=[3, 24, 7])
    assert c.max_capture_size == 24
    assert c.get_padded_batch_size(25) is None


def test_explicit_sizes_with_the_same_explicit_max_are_kept():
    c = CUDAGraphConfig(capture_sizes=[1, 8], max_capture_size=8)
    assert c.max_capture_size == 8 and c.cudagraph_capture_sizes == (1, 8)


def test_explicit_size_above_max_names_both_values():
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(capture_sizes=[1, 2, 1024], max_capture_size=512)
    message = str(info.value)
    assert "1024" in message and "max_capture_size=512" in message


@pytest.mark.parametrize(
    "field, value",
    [
        ("capture_sizes", [1, 0]),
        ("capture_sizes", [1, -8]),
        ("capture_sizes", [1, True]),
        ("capture_sizes", [1, "8"]),
        ("capture_sizes", [1, 2.0]),
        ("capture_sizes", 8),
        ("capture_sizes", "1,2,4"),
        ("seq_len_buckets", [128, 0]),
        ("max_capture_size", 0),
        ("max_capture_size", "512"),
        ("max_capture_size", True),
        ("num_warmups", -1),
        ("num_warmups", 1.5),
        ("max_num_reqs", 0),
        ("uniform_decode_query_len", 0),
        ("max_cached_graphs", 0),
        ("capture_after", 0),
        ("min_replays_to_keep", -1),
        ("min_tokens_for_graph", 0),
        ("pad_value", "0"),
        ("pad_value", True),
        ("pad_value", None),
        ("eviction", "fifo"),
        ("output_mode", "borrow"),
        ("on_capture_error", "ignore"),
        ("capture_mode", "loose"),
        ("backend", "torch"),
        ("mode", "fullish"),
        ("mode", True),
        ("memory_budget", "lots"),
    ],
)
def test_invalid_values_raise_config_error_naming_the_field(field, value):
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(**{field: value})
    assert f"field '{field}" in str(info.value)
    assert not isinstance(info.value, ValidationError)


def test_unknown_field_is_rejected_and_valid_fields_listed():
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(capture_size=[1, 2])
    assert "'capture_size'" in str(info.value) and "capture_sizes" in str(info.value)


def test_sequence_index_is_in_the_field_path():
    with pytest.raises(ConfigError, match=r"capture_sizes\[3\]"):
        CUDAGraphConfig(capture_sizes=[1, 2, 4, -1])


def test_tuple_sizes_accepted():
    assert CUDAGraphConfig(capture_sizes=[2, 1]).capture_sizes == (1, 2)


def test_min_tokens_above_max_tokens_is_rejected():
    with pytest.raises(ConfigError, match="max_tokens_for_graph=4 is below min_tokens_for_graph=8"):
        CUDAGraphConfig(min_tokens_for_graph=8, max_tokens_for_graph=4)


@pytest.mark.parametrize("field, given, stored", [
    ("eviction", "LFU", "lfu"), ("output_mode", " View ", "view"), ("on_capture_error", "Raise", "raise"),
    ("capture_mode", "THREAD_LOCAL", "thread_local"), ("backend", "Host", "host"),
])
def test_choice_fields_are_case_insensitive(field, given, stored):
    assert getattr(CUDAGraphConfig(**{field: given}), field) == stored


@pytest.mark.parametrize("field, value", [
    ("max_capture_size", 64), ("max_capture_size", -1), ("mode", "none"), ("eviction", "lfu"),
])
def test_config_is_immutable(field, value):
    """Regression (issue 11): a field changed after jit was silently ignored (the keys were built
    once), so a batch of 20 ran eagerly with a misleading reason. Assignment now fails, naming the
    way to derive a config."""
    c = CUDAGraphConfig()
    before = c.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError, match=rf"cannot set '{field}'.*replace\({field}="):
        setattr(c, field, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(c, field)
    assert c.to_dict() == before


def test_sizes_are_tuples_so_they_cannot_change_in_place():
    c = CUDAGraphConfig(capture_sizes=[4, 1], seq_len_buckets=[64])
    assert isinstance(c.capture_sizes, tuple) and isinstance(c.seq_len_buckets, tuple)
    with pytest.raises(AttributeError):
        c.capture_sizes.append(1024)  # type: ignore[union-attr]


def test_replace_derives_a_validated_config():
    c = CUDAGraphConfig(capture_sizes=[1, 2, 4, 8], eviction="lfu")
    smaller = c.replace(capture_sizes=[1, 2])
    assert smaller.max_capture_size == 2 and smaller.cudagraph_capture_sizes == (1, 2)
    assert smaller.eviction == "lfu" and c.cudagraph_capture_sizes == (1, 2, 4, 8)
    wider = CUDAGraphConfig().replace(max_capture_size=64)
    assert wider.cudagraph_capture_sizes[-1] == 64 and len(wider.cudagraph_capture_sizes) == 11
    assert CUDAGraphConfig(capture_sizes=[1, 2]).replace(mode="none").cudagraph_capture_sizes == ()
    with pytest.raises(ConfigError, match="field 'max_capture_size'"):
        c.replace(max_capture_size=-1)
    with pytest.raises(ConfigError, match="unknown field"):
        c.replace(max_capture_sizes=8)


def test_model_copy_with_update_is_validated():
    """pydantic's model_copy(update=...) skips validation; the config's goes through replace."""
    c = CUDAGraphConfig()
    assert c.model_copy(update={"max_capture_size": 16}).cudagraph_capture_sizes[-1] == 16
    with pytest.raises(ConfigError, match="eviction"):
        c.model_copy(update={"eviction": "fifo"})
    with pytest.raises(ConfigError, match="max_capture_size"):
        c.model_copy(update={"max_capture_size": 0})
    assert c.model_copy() == c


def test_a_jit_keeps_the_config_it_was_given(monkeypatch):
    """The scenario of issue 11: instead of changing a config under a jit, derive one for a new jit."""
    from cupygraph import jit

    monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    small = CUDAGraphConfig(backend="host", max_capture_size=16)
    f = jit(lambda x: x * 2, config=small)
    with pytest.raises(dataclasses.FrozenInstanceError):
        small.max_capture_size = 32
    g = jit(lambda x: x * 2, config=small.replace(max_capture_size=32))
    x = np.arange(20.0).reshape(20, 1)
    assert np.array_equal(f(x), x * 2) and np.array_equal(g(x), x * 2)
    assert f.registry.num_graphs() == 0 and f.stats().fallbacks == 1  # 20 > 16: eager, as configured
    assert g.registry.num_graphs() == 1 and g.stats().fallbacks == 0  # 20 pads to 24


# -- modes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, mode", [
    ("full", M.FULL), ("FULL", M.FULL), (" Piecewise ", M.PIECEWISE), ("none", M.NONE),
    ("full_decode_only", M.FULL_DECODE_ONLY), ("Full_And_Piecewise", M.FULL_AND_PIECEWISE), (M.FULL, M.FULL),
])
def test_mode_parsing(text, mode):
    assert M.parse(text) is mode
    assert CUDAGraphConfig(mode=text).mode is mode


@pytest.mark.parametrize("bad", ["fullest", "", True, False, 3, [1, 2], None, 2.5])
def test_mode_parse_errors_list_valid_modes(bad):
    with pytest.raises(ValueError) as info:
        M.parse(bad)
    assert "FULL_AND_PIECEWISE" in str(info.value) and "NONE" in str(info.value)


@pytest.mark.parametrize("value", [0, 2, 2.0, 1.0, [2, 0], (2, 1), [2, 1], np.int64(2)])
def test_mode_values_are_not_names(value):
    """Regression (issue 11): the enum's internal values were accepted (``2.0 == 2``, a list passed
    for the tuple of FULL_DECODE_ONLY), although the schema allows only names."""
    with pytest.raises(ValueError, match="unknown CUDA graph mode"):
        M.parse(value)
    with pytest.raises(ConfigError, match=r"field 'mode': unknown CUDA graph mode .*valid modes"):
        CUDAGraphConfig(mode=value)


# (decode_mode, mixed_mode, separate_routine, max_cudagraph_mode, has_full, has_piecewise, has_graphs, runtime)
MODE_TABLE = {
    M.NONE: (M.NONE, M.NONE, False, M.NONE, False, False, False, True),
    M.PIECEWISE: (M.PIECEWISE, M.PIECEWISE, False, M.PIECEWISE, False, True, True, True),
    M.FULL: (M.FULL, M.FULL, False, M.FULL, True, False, True, True),
    M.FULL_DECODE_ONLY: (M.FULL, M.NONE, True, M.FULL, True, False, True, False),
    M.FULL_AND_PIECEWISE: (M.FULL, M.PIECEWISE, True, M.FULL, True, True, True, False),
}


@pytest.mark.parametrize("mode", list(M))
def test_mode_helpers_have_vllm_meanings(mode):
    decode, mixed, separate, strongest, full, piecewise, graphs, runtime = MODE_TABLE[mode]
    assert mode.decode_mode() is decode
    assert mode.mixed_mode() is mixed
    assert mode.separate_routine() is separate
    assert mode.max_cudagraph_mode() is strongest
    assert mode.has_full_cudagraphs() is full
    assert mode.has_piecewise_cudagraphs() is piecewise
    assert mode.has_graphs() is graphs
    assert mode.valid_runtime_modes() is runtime


@pytest.mark.parametrize("mode, used", [
    (M.NONE, {M.NONE}), (M.PIECEWISE, {M.PIECEWISE}), (M.FULL, {M.FULL}),
    (M.FULL_DECODE_ONLY, {M.FULL, M.NONE}), (M.FULL_AND_PIECEWISE, {M.FULL, M.PIECEWISE}),
])
def test_has_mode(mode, used):
    for runtime in (M.NONE, M.PIECEWISE, M.FULL):
        assert mode.has_mode(runtime) is (runtime in used)


def test_mode_values_match_vllm():
    assert (M.NONE.value, M.PIECEWISE.value, M.FULL.value) == (0, 1, 2)
    assert M.FULL_DECODE_ONLY.value == (2, 0) and M.FULL_AND_PIECEWISE.value == (2, 1)


def test_mode_none_means_no_sizes_even_with_explicit_sizes():
    assert CUDAGraphConfig(mode="NONE").cudagraph_capture_sizes == ()
    c = CUDAGraphConfig(mode="NONE", capture_sizes=[1, 2, 4])
    assert c.cudagraph_capture_sizes == () and c.largest_capture_size is None
    assert c.get_padded_batch_size(1) is None


def test_disabled():
    c = CUDAGraphConfig.disabled()
    assert c.mode is M.NONE and c.cudagraph_capture_sizes == ()
    assert not any(c.should_use_cudagraph(n) for n in (1, 8, 512))


# -- padding and should_use_cudagraph -------------------------------------------------------------


@pytest.mark.parametrize("n, padded", [
    (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (248, 248), (249, 256), (257, 272), (511, 512), (512, 512), (513, None),
])
def test_get_padded_batch_size_default_sizes(n, padded):
    assert CUDAGraphConfig().get_padded_batch_size(n) == padded


def test_get_padded_batch_size_explicit_sizes():
    c = CUDAGraphConfig(capture_sizes=[3, 10])
    assert [c.get_padded_batch_size(n) for n in (1, 3, 4, 10, 11)] == [3, 3, 10, 10, None]


def test_should_use_cudagraph():
    c = CUDAGraphConfig()
    assert c.should_use_cudagraph(1) and c.should_use_cudagraph(300) and c.should_use_cudagraph(512)
    assert not c.should_use_cudagraph(513)
    bounded = CUDAGraphConfig(min_tokens_for_graph=4, max_tokens_for_graph=64)
    assert [bounded.should_use_cudagraph(n) for n in (3, 4, 64, 65)] == [False, True, True, False]


def test_seq_len_buckets():
    c = CUDAGraphConfig(seq_len_buckets=[512, 128, 2048])
    assert c.seq_len_buckets == (128, 512, 2048)
    assert [c.get_padded_seq_len(s) for s in (None, 1, 128, 129, 2048, 2049)] == [None, 128, 128, 512, 2048, None]
    assert c.should_use_cudagraph(8, seq_len=2000) and not c.should_use_cudagraph(8, seq_len=4096)
    assert CUDAGraphConfig().get_padded_seq_len(777) == 777
    assert CUDAGraphConfig().should_use_cudagraph(8, seq_len=10**6)


# -- byte sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, size", [
    (None, None), (1, 1), (4096, 4096), ("100", 100), ("100b", 100), ("1KB", 1000), ("1kib", 1024),
    ("2GiB", 2 * 2**30), ("512 MB", 512 * 10**6), (" 256MiB ", 256 * 2**20), ("1.5GiB", 3 * 2**29), ("1TiB", 2**40),
])
def test_parse_byte_size(text, size):
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("bad", ["2 GiBB", "lots", "", "-5MB", "1e9", "0", "0.0001b", 0, -5, True, 1.5, [1]])
def test_parse_byte_size_errors(bad):
    with pytest.raises(ValueError) as info:
        parse_byte_size(bad)
    assert "byte size" in str(info.value)


@pytest.mark.parametrize("text", ["1.9 B", "0.5b", "1.0001KiB", "2.5"])
def test_fractional_bytes_are_refused_not_rounded(text):
    """Regression (issue 11): "1.9 B" became 1 byte."""
    with pytest.raises(ValueError, match="not a whole number"):
        parse_byte_size(text)
    with pytest.raises(ConfigError, match=r"field 'memory_budget'.*not a whole number"):
        CUDAGraphConfig(memory_budget=text)


def test_fractions_of_larger_units_are_whole_bytes():
    assert parse_byte_size("0.5KiB") == 512 and parse_byte_size("1.5 GB") == 1_500_000_000


def test_memory_budget_accepts_strings_and_ints():
    assert CUDAGraphConfig(memory_budget="256MiB").memory_budget == 256 * 2**20
    assert CUDAGraphConfig(memory_budget=10**9).memory_budget == 10**9
    with pytest.raises(ConfigError, match=r"memory_budget.*'2 GiBB'"):
        CUDAGraphConfig(memory_budget="2 GiBB")
    with pytest.raises(ConfigError, match="memory_budget"):
        CUDAGraphConfig(memory_budget=-5)


# -- NumPy integers --------------------------------------------------------------------------------


def test_numpy_integers_are_accepted_wherever_ints_are():
    """Regression (issue 11): capture_sizes=np.arange(1, 5) gave an unclear error."""
    c = CUDAGraphConfig(
        capture_sizes=np.arange(1, 5), seq_len_buckets=np.array([512, 128], dtype=np.int32),
        num_warmups=np.int64(2), max_num_reqs=np.uint16(4), uniform_decode_query_len=np.int8(1),
        max_cached_graphs=np.int64(3), memory_budget=np.int64(2**20), capture_after=np.int32(2),
        min_tokens_for_graph=np.int64(1), max_tokens_for_graph=np.int64(4), pad_value=np.int16(-1),
    )
    assert c.capture_sizes == (1, 2, 3, 4) and c.seq_len_buckets == (128, 512)
    assert c.cudagraph_capture_sizes == (1, 2, 3, 4) and c.max_capture_size == 4
    values = [c.num_warmups, c.max_num_reqs, c.max_cached_graphs, c.memory_budget, c.capture_after, c.pad_value]
    assert values == [2, 4, 3, 2**20, 2, -1] and all(type(v) is int for v in values)
    assert all(type(s) is int for s in c.capture_sizes)
    assert CUDAGraphConfig(max_capture_size=np.int64(64)).cudagraph_capture_sizes[-1] == 64
    assert CUDAGraphConfig(capture_sizes=range(2, 5)).capture_sizes == (2, 3, 4)
    assert type(CUDAGraphConfig(pad_value=np.float32(0.5)).pad_value) is float
    assert CUDAGraphConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("field, value, words", [
    ("capture_sizes", np.array([1, 2, 4], dtype=bool), "capture_sizes[0]"),
    ("capture_sizes", np.array([1.0, 2.0]), "capture_sizes[0]"),
    ("capture_sizes", np.arange(4).reshape(2, 2), "got a 2-D array"),
    ("capture_sizes", [np.int64(1), np.bool_(True)], "capture_sizes[1]"),
    ("num_warmups", np.bool_(True), "num_warmups"),
    ("num_warmups", np.float64(2.0), "num_warmups"),
    ("max_capture_size", np.int64(0), "greater than or equal to 1"),
    ("memory_budget", np.bool_(True), "memory_budget"),
    ("pad_value", np.bool_(False), "pad_value"),
])
def test_numpy_bools_floats_and_shapes_are_still_refused(field, value, words):
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(**{field: value})
    assert f"field '{field}" in str(info.value) and words in str(info.value)


# -- conversions -----------------------------------------------------------------------------------


NON_DEFAULT = dict(
    mode="FULL_AND_PIECEWISE", capture_sizes=[1, 2, 4, 8, 64], max_capture_size=64, max_num_reqs=32,
    uniform_decode_query_len=2, seq_len_buckets=[256, 1024], num_warmups=3, max_cached_graphs=7,
    memory_budget="1GiB", eviction="lfu", min_replays_to_keep=5, capture_after=2, pad_value=-1.5,
    output_mode="view", on_capture_error="raise", capture_mode="global", gc_freeze=False, debug=True,
    min_tokens_for_graph=2, max_tokens_for_graph=100, prefer_piecewise=True, backend="host",
)


def test_to_dict_from_dict_round_trip():
    c = CUDAGraphConfig(**NON_DEFAULT)
    data = c.to_dict()
    assert data["mode"] == "FULL_AND_PIECEWISE" and data["memory_budget"] == 2**30
    assert set(data) == set(CUDAGraphConfig.model_fields)
    back = CUDAGraphConfig.from_dict(data)
    assert back == c and back.cudagraph_capture_sizes == c.cudagraph_capture_sizes
    assert CUDAGraphConfig.from_dict(CUDAGraphConfig().to_dict()) == CUDAGraphConfig()


def test_round_trip_of_sizes_only_config_keeps_sizes():
    c = CUDAGraphConfig(capture_sizes=[2, 6])
    back = CUDAGraphConfig.from_dict(c.to_dict())
    assert back.cudagraph_capture_sizes == (2, 6) and back.max_capture_size == 6


def test_from_dict_errors_name_source():
    with pytest.raises(ConfigError, match=r"^job\.yaml: field 'num_warmups'"):
        CUDAGraphConfig.from_dict({"num_warmups": -2}, source="job.yaml")
    with pytest.raises(ConfigError, match=r"^job\.yaml: expected a mapping.*list"):
        CUDAGraphConfig.from_dict([("mode", "FULL")], source="job.yaml")


@pytest.mark.parametrize("ext", ["yaml", "yml", "json", "toml"])
def test_save_config_load_config_round_trip(tmp_path, ext):
    c = CUDAGraphConfig(**NON_DEFAULT)
    path = tmp_path / f"config.{ext}"
    save_config(c, path)
    assert load_config(path) == c
    assert load_config(str(path)) == c


@pytest.mark.parametrize("ext", ["yaml", "json", "toml"])
def test_save_config_round_trip_of_defaults_and_special_pad(tmp_path, ext):
    path = tmp_path / f"d.{ext}"
    save_config(CUDAGraphConfig(), path)
    assert load_config(path) == CUDAGraphConfig()
    save_config(CUDAGraphConfig(pad_value=float("nan")), path)
    assert math.isnan(load_config(path).pad_value)
    save_config(CUDAGraphConfig(pad_value=float("-inf")), path)
    assert load_config(path).pad_value == float("-inf")


# -- errors and schema -----------------------------------------------------------------------------


def test_field_path():
    assert field_path(("capture_sizes", 3)) == "capture_sizes[3]"
    assert field_path(("a", "b", 0, 1)) == "a.b[0][1]"
    assert field_path(()) == "<config>"


def test_format_validation_error_uses_source_and_lines():
    try:
        CUDAGraphConfig.model_validate({"num_warmups": -1, "eviction": "x"})
    except ValidationError as err:
        lines = {"num_warmups": 7, "eviction": 9}
        text = format_validation_error(err, source="f.yaml", line_of=lambda loc: lines.get(loc[0]))
    else:
        pytest.fail("model_validate accepted invalid values")
    assert text.splitlines() == [
        "f.yaml:7: field 'num_warmups': Input should be greater than or equal to 0 (got -1)",
        "f.yaml:9: field 'eviction': eviction must be one of lru, lfu, benefit (got 'x')",
    ]


def test_json_schema_uses_json_schema_bounds():
    """pydantic's own names (ge, le) would be keywords JSON Schema validators silently ignore."""
    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield key
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    schema = CUDAGraphConfig.model_json_schema()
    assert not {"ge", "le", "gt", "lt"} & set(keys(schema))
    assert schema["properties"]["capture_sizes"]["anyOf"][0]["items"]["minimum"] == 1


def test_json_schema_describes_every_field_and_files_use_names():
    schema = CUDAGraphConfig.model_json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(CUDAGraphConfig.model_fields)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{name} has no description"
    assert schema["properties"]["mode"]["enum"] == [m.name for m in M]
    assert schema["properties"]["mode"]["default"] == "FULL"
    budget_types = {t.get("type") for t in schema["properties"]["memory_budget"]["anyOf"]}
    assert budget_types == {"integer", "string", "null"}


# -- CUPYGRAPH_DISABLE -----------------------------------------------------------------------------


@pytest.mark.parametrize("value, disabled", [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False), ("off", False),
    ("1", True), ("true", True), ("yes", True), ("ON", True),
])
def test_graphs_disabled_by_env(monkeypatch, value, disabled):
    monkeypatch.setattr(config_defaults, "_DISABLE_LOGGED", True)
    if value is None:
        monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    else:
        monkeypatch.setenv("CUPYGRAPH_DISABLE", value)
    assert graphs_disabled_by_env() is disabled


def test_graphs_disabled_by_env_logs_once(monkeypatch, caplog):
    monkeypatch.setattr(config_defaults, "_DISABLE_LOGGED", False)
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        assert graphs_disabled_by_env() and graphs_disabled_by_env()
    assert [r.getMessage() for r in caplog.records].count(
        "CUPYGRAPH_DISABLE is set: every cupygraph front door runs eagerly (mode NONE)"
    ) == 1


def test_set_default_config_returns_the_previous_one_to_restore():
    mine = CUDAGraphConfig(max_capture_size=8)
    previous = config_defaults.set_default_config(mine)
    try:
        assert config_defaults.default_config() is mine  # immutable, so shared rather than copied
        assert config_defaults.set_default_config(None) is mine
        assert config_defaults.default_config() == CUDAGraphConfig()
    finally:
        config_defaults.set_default_config(previous)


def test_apply_env_overrides(monkeypatch):
    monkeypatch.setattr(config_defaults, "_DISABLE_LOGGED", True)
    c = CUDAGraphConfig(capture_sizes=[1, 2, 4], eviction="lfu")
    monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    assert config_defaults.apply_env_overrides(c) is c
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    off = config_defaults.apply_env_overrides(c)
    assert off.mode is M.NONE and off.replace(mode="FULL") == c


# -- pad_value against an input dtype (a helper the front doors call when they make a key) --------


@pytest.mark.parametrize("pad, dtype, words", [
    (2.7, "int32", "not a whole number"), (float("nan"), "int32", "not finite"), (-1, "uint8", "outside the range"),
    (256, "uint8", "0..255"), (1e300, "float16", "would become inf"), (2, "bool", "0 or 1"),
    (0, "object", "cannot be padded"), (float("-inf"), "int64", "not finite"),
])
def test_pad_value_problem_names_the_value_and_dtype(pad, dtype, words):
    problem = pad_value_problem(pad, dtype)
    assert problem is not None and words in problem and dtype in problem and "pad_value=" in problem


@pytest.mark.parametrize("pad, dtype", [
    (0, "int8"), (2.0, "int32"), (255, "uint8"), (-1.5, "float16"), (float("nan"), "float32"),
    (float("-inf"), "float16"), (1, "bool"), (0.5, "complex64"), (65504, "float16"),
])
def test_pad_value_problem_accepts_values_the_dtype_holds(pad, dtype):
    assert pad_value_problem(pad, dtype) is None
    assert np.full(2, pad, dtype=dtype)[0] == pad or pad != pad  # NumPy stores it exactly (NaN aside)
