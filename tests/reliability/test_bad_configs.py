"""Broken configuration files: each one is rejected with a ``ConfigError`` that names the file, the
field and the line (where the format has lines); none is accepted silently; none crashes the
loader or makes it hang.

The corpus is ``tests/unit/data/bad_configs`` (its ``expected.yaml`` says what each message must contain,
and why a file has no line or no field when it has none; ``tests/unit/test_config_files.py`` checks the
wording). Here cases too large or too binary to keep in the repository are generated: 10 MB files,
alias bombs, deep nesting, other encodings. Pathological inputs are refused by explicit limits
(file size, nesting depth, aliases, list length), each checked here by what the loader does, never
by a clock. hypothesis then feeds the loader random bytes and random values for every field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reliability_helpers import record  # noqa: E402

from cupygraph.config import files as config_files  # noqa: E402
from cupygraph.config.files import MAX_CONFIG_BYTES, MAX_NESTING_DEPTH, load_config  # noqa: E402
from cupygraph.config.model import MAX_LIST_LENGTH, CUDAGraphConfig  # noqa: E402
from cupygraph.errors import ConfigError  # noqa: E402

BAD = Path(__file__).resolve().parents[1] / "unit" / "data" / "bad_configs"
EXPECTED = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))
CORPUS = sorted(p.name for p in BAD.iterdir() if p.name != "expected.yaml")
LINED = (".yaml", ".yml", ".json", ".toml")
LONGEST_LINE = 2000  # a message echoes values shortened, never a whole file


def rejected(path: Path) -> str:
    """Load ``path``; it must fail with a ConfigError naming the file on every line; return the message."""
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    lines = message.splitlines()
    assert lines and all(line.startswith(str(path)) for line in lines), message[:500]
    assert all(len(line) <= LONGEST_LINE for line in lines), f"{path.name}: a {max(map(len, lines))}-character line"
    assert "Traceback" not in message
    return message


def test_corpus_has_at_least_forty_files_each_with_expectations():
    assert len(CORPUS) >= 40, len(CORPUS)
    assert set(CORPUS) == set(EXPECTED)
    kinds = {Path(name).suffix for name in CORPUS}
    assert {".yaml", ".yml", ".json", ".toml", ".ini"} <= kinds


def _check_corpus_file(name: str) -> None:
    path = BAD / name
    expected = EXPECTED[name]
    message = rejected(path)
    if path.suffix in LINED:
        assert "line" in expected or "no_line" in expected, f"{name}: give the line or say why there is none"
    if "line" in expected:
        assert f"{path}:{expected['line']}:" in message, message
    if "no_field" not in expected:
        assert "field '" in message, f"{name}: the message names no field: {message}"


@pytest.mark.parametrize("name", CORPUS)
def test_each_corpus_file_is_rejected_with_file_field_and_line(name):
    _check_corpus_file(name)


def test_corpus_figures_are_what_the_run_found():
    """The figure recorded for the corpus counts files actually loaded and failures actually seen
    (it used to add hard-coded and order-dependent counts, and could never fail)."""
    failures = []
    for name in CORPUS:
        try:
            _check_corpus_file(name)
        except (AssertionError, pytest.fail.Exception) as err:
            failures.append(f"{name}: {err}")
    row = record("bad_configs", "corpus", cases=len(CORPUS), failures=len(failures))
    assert failures == [], failures
    assert row["cases"] == len(EXPECTED) >= 40 and row["failures"] == 0


# -- generated at test time ------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, body", [
    (".yaml", "mode: FULL\nseq_len_buckets:\n" + "  - 1\n" * 1_800_000),
    (".json", '{"seq_len_buckets": [' + "1, " * 3_500_000 + "1]}"),
    (".toml", "seq_len_buckets = [" + "1, " * 3_500_000 + "1]\n"),
], ids=["yaml", "json", "toml"])
def test_ten_megabyte_files_are_refused_by_the_size_limit_before_parsing(tmp_path, monkeypatch, suffix, body):
    path = tmp_path / f"huge{suffix}"
    path.write_text(body, encoding="utf-8")
    assert path.stat().st_size >= 10 * 10**6

    def parse_called(*args, **kwargs):
        raise AssertionError("an oversized file must not reach the parser")

    monkeypatch.setattr(config_files, "_parse", parse_called)
    message = rejected(path)
    assert f"limited to {MAX_CONFIG_BYTES} bytes" in message


@pytest.mark.parametrize("kind", ["lists", "mappings", "strings"])
def test_alias_bombs_are_refused_at_the_first_alias(tmp_path, kind):
    if kind == "lists":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    elif kind == "mappings":
        lines = ["a0: &a0 {x: 1, y: 2}"]
        lines += [f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(10)) + "}" for i in range(1, 12)]
    else:
        lines = ["s0: &s0 " + "lol" * 1000] + [f"s{i}: &s{i} [*s{i - 1}, *s{i - 1}]" for i in range(1, 30)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nmode: FULL\n", encoding="utf-8")
    message = rejected(path)
    assert f"{path}:2:" in message and "aliases" in message


@pytest.mark.parametrize("suffix, body, line", [
    (".json", '{"capture_sizes": ' + "[" * 100_000 + "]" * 100_000 + "}", 1),
    (".yaml", "capture_sizes: " + "[" * 100_000 + "]" * 100_000 + "\n", 1),
    (".toml", "capture_sizes = " + "[" * 100_000 + "]" * 100_000 + "\n", 1),
    # The mapping is level 1 and each "- " line one more: level 9 starts on line 9.
    (".yaml", "capture_sizes:\n" + "".join("  " * i + "- \n" for i in range(900)), MAX_NESTING_DEPTH + 1),
    (".toml", "mode = 'FULL'\nseq_len_buckets" + ".k" * 5000 + " = 1\n", 2),
], ids=["json", "yaml_flow", "toml", "yaml_block", "toml_dotted_keys"])
def test_deep_nesting_is_refused_by_the_depth_limit(tmp_path, suffix, body, line):
    """Regression: the parsers recurse per level and raised RecursionError out of the loader (and
    the YAML file took over a second, which a wall-clock assertion here turned into a flaky test)."""
    path = tmp_path / f"deep{suffix}"
    path.write_text(body, encoding="utf-8")
    message = rejected(path)
    assert f"{path}:{line}: values are nested too deeply: more than {MAX_NESTING_DEPTH} levels (the limit)" in message


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".toml"])
def test_the_depth_limit_is_exact(tmp_path, suffix):
    """A mapping with lists nested to exactly the limit is parsed (and its value refused as a field
    error); one more level is refused by the limit, naming the file, the line and the limit."""
    for lists, refused_by_limit in ((MAX_NESTING_DEPTH - 1, False), (MAX_NESTING_DEPTH, True)):
        value = "[" * lists + "1" + "]" * lists
        text = {".json": f'{{"mode": "FULL",\n"capture_sizes": {value}}}',
                ".yaml": f"mode: FULL\ncapture_sizes: {value}\n",
                ".toml": f'mode = "FULL"\ncapture_sizes = {value}\n'}[suffix]
        path = tmp_path / f"depth{lists}{suffix}"
        path.write_text(text, encoding="utf-8")
        message = rejected(path)
        if refused_by_limit:
            assert f"{path}:2: values are nested too deeply: more than {MAX_NESTING_DEPTH} levels" in message
        else:
            assert f"{path}:2: field 'capture_sizes[0]'" in message and "nested" not in message


def test_brackets_in_strings_and_comments_are_not_nesting(tmp_path):
    deep = "[" * (MAX_NESTING_DEPTH + 5)
    (tmp_path / "s.toml").write_text(f'mode = "FULL"  # {deep}\nbackend = \'\'\'host\'\'\'\n', encoding="utf-8")
    assert load_config(tmp_path / "s.toml").backend == "host"
    for suffix in (".json", ".yaml"):
        path = tmp_path / f"m{suffix}"
        path.write_text(json.dumps({"mode": deep}), encoding="utf-8")  # JSON is YAML too
        assert "field 'mode': unknown CUDA graph mode" in rejected(path)


@pytest.mark.parametrize("field", ["capture_sizes", "seq_len_buckets"])
def test_size_lists_are_limited_in_length(tmp_path, field):
    path = tmp_path / "long.json"
    path.write_text(json.dumps({field: list(range(1, MAX_LIST_LENGTH + 2))}), encoding="utf-8")
    message = rejected(path)
    assert f"field '{field}'" in message and f"at most {MAX_LIST_LENGTH}" in message and "the limit" in message
    path.write_text(json.dumps({field: list(range(1, MAX_LIST_LENGTH + 1))}), encoding="utf-8")
    assert len(getattr(load_config(path), field)) == MAX_LIST_LENGTH


@pytest.mark.parametrize("encoding, words", [
    ("utf-16", "byte order mark"),
    ("utf-16-be", "U+0000"),  # no BOM: NUL bytes YAML refuses
    ("utf-32", "byte order mark"),
    ("latin-1", "not valid UTF-8"),
    ("cp1252", "not valid UTF-8"),
])
def test_other_encodings_are_rejected_naming_the_encoding(tmp_path, encoding, words):
    path = tmp_path / "encoded.yaml"
    path.write_bytes("mode: FULL\n# \u00e9t\u00e9 \u2014 caf\u00e9\nnum_warmups: 2\n".encode(encoding, errors="replace")
                     if encoding != "utf-16-be" else "mode: FULL\n".encode(encoding))
    message = rejected(path)
    assert words in message, message
    if encoding in ("latin-1", "cp1252"):
        assert f"{path}:2:" in message  # the line of the first byte that is not UTF-8


def test_utf8_with_a_byte_order_mark_and_crlf_lines_load(tmp_path):
    """Regression: a UTF-8 BOM (some Windows editors write one) made valid JSON fail."""
    for suffix, text in ((".json", '{\r\n  "mode": "PIECEWISE"\r\n}\r\n'), (".yaml", "mode: PIECEWISE\r\n"),
                         (".toml", 'mode = "PIECEWISE"\r\n')):
        path = tmp_path / f"bom{suffix}"
        path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        assert load_config(path).mode.name == "PIECEWISE"
    bad = tmp_path / "crlf.yaml"
    bad.write_bytes(b"mode: FULL\r\n\r\nnum_warmups: two\r\n")
    assert f"{bad}:3:" in rejected(bad)


@pytest.mark.parametrize("suffix, text, line", [
    (".json", '{\n  "mode": "FULL",\n  "eviction": "fifo"\n}\n', 3),
    (".toml", 'mode = "FULL"\n\n"max_cached_graphs" = 0\n', 3),
    (".yaml", "mode: FULL\n1: 2\n", 2),
])
def test_field_errors_carry_the_line_in_every_format(tmp_path, suffix, text, line):
    """Regression: JSON and TOML field errors named no line."""
    path = tmp_path / f"field{suffix}"
    path.write_text(text, encoding="utf-8")
    assert f"{path}:{line}: field '" in rejected(path)


@pytest.mark.parametrize("key", ["k" * 100_000, "mode\r", "a\nb", "\x1b[31m"], ids=["long", "cr", "newline", "escape"])
def test_odd_unknown_keys_are_shown_on_one_short_line(tmp_path, key):
    path = tmp_path / "oddkey.json"
    path.write_text(json.dumps({key: 1}), encoding="utf-8")
    message = rejected(path)
    assert "unknown field" in message and len(message) < LONGEST_LINE and len(message.splitlines()) == 1


# -- none crashing the loader, whatever the input ------------------------------------------------------


FIELDS = list(CUDAGraphConfig.model_fields)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
              st.text(max_size=30), st.sampled_from(["FULL", "lru", "copy", "2GiB", "host", "1e9", ""])),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=8), children, max_size=3)),
    max_leaves=8,
)


def _dump(data: dict, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(data)
    if suffix == ".yaml":
        return yaml.safe_dump(data)
    import tomli_w

    return tomli_w.dumps(data)


def test_random_field_values_are_accepted_or_rejected_cleanly(tmp_path_factory):
    seen = {"files": 0, "accepted": 0}

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(data=st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=12)), values, max_size=6),
           suffix=st.sampled_from([".json", ".yaml", ".toml"]))
    def check(data, suffix):
        try:
            text = _dump(data, suffix)
        except (TypeError, ValueError):
            hypothesis.assume(False)  # not representable in this format (None in TOML, ...)
        path = tmp_path_factory.mktemp("random") / f"config{suffix}"
        path.write_text(text, encoding="utf-8")
        seen["files"] += 1
        try:
            config = load_config(path)
        except ConfigError as err:
            assert all(line.startswith(str(path)) for line in str(err).splitlines())
            assert max(map(len, str(err).splitlines())) <= LONGEST_LINE
        else:
            seen["accepted"] += 1
            assert set(data) <= set(FIELDS)  # an unknown key is never accepted
            assert CUDAGraphConfig.from_dict(config.to_dict()) == config

    check()
    record("bad_configs", "random field values", cases=seen["files"], accepted=seen["accepted"])
    # Both outcomes were exercised, so the figure means something.
    assert 0 < seen["accepted"] < seen["files"], seen


def test_random_bytes_never_crash_the_loader(tmp_path_factory):
    seen = {"files": 0}

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(blob=st.binary(max_size=300), suffix=st.sampled_from([".json", ".yaml", ".toml", ".yml"]))
    def check(blob, suffix):
        path = tmp_path_factory.mktemp("bytes") / f"blob{suffix}"
        path.write_bytes(blob)
        seen["files"] += 1
        try:
            load_config(path)
        except ConfigError as err:
            assert all(line.startswith(str(path)) for line in str(err).splitlines())

    check()
    record("bad_configs", "random bytes", cases=seen["files"])
    assert seen["files"] > 0
