"""Config files: every broken file in tests/unit/data/bad_configs fails with a message that names the file,
the line (YAML/JSON), the field and what is allowed; every shipped config in configs/ loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cupygraph.config import files as config_files
from cupygraph.config.files import MAX_CONFIG_BYTES, load_config, save_config
from cupygraph.config.model import CUDAGraphConfig, CUDAGraphMode
from cupygraph.errors import ConfigError, CupyGraphError

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "unit" / "data" / "bad_configs"
EXPECTED = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))
BAD_FILES = sorted(p.name for p in BAD.iterdir() if p.name != "expected.yaml")
SHIPPED = sorted((REPO / "configs").glob("*.yaml"))


def test_corpus_and_expectations_match():
    assert len(BAD_FILES) >= 25
    assert set(BAD_FILES) == set(EXPECTED), "every bad config needs an entry in expected.yaml and vice versa"


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_config_message(name):
    path = BAD / name
    expected = EXPECTED[name]
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    problems = message.splitlines()
    # One line per problem, each starting with the file so editors and grep can jump to it.
    assert problems and all(line.startswith(str(path)) for line in problems), message
    assert len(problems) == expected.get("problems", 1), message
    if "line" in expected:
        assert f"{path}:{expected['line']}:" in message, message
    for needle in expected["contains"]:
        assert needle in message, f"{needle!r} missing from: {message}"
    assert "Traceback" not in message
    # Parser and pydantic internals stay out of the user's way.
    err = info.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_config_error_is_catchable_as_value_error_and_base():
    with pytest.raises(ValueError):
        load_config(BAD / "zero_size.yaml")
    with pytest.raises(CupyGraphError):
        load_config(BAD / "zero_size.yaml")


def test_multi_error_lines_point_at_each_field():
    # Regression: pydantic used to route model_validate through CUDAGraphConfig.__init__, which
    # collapsed every problem into one error at the first line of the file.
    with pytest.raises(ConfigError) as info:
        load_config(BAD / "many_errors.yaml")
    message = str(info.value)
    lines = {line.split(": field ")[1].split(":")[0]: line.split(": field ")[0] for line in message.splitlines()}
    assert lines == {
        "'num_warmups'": f"{BAD / 'many_errors.yaml'}:2",
        "'eviction'": f"{BAD / 'many_errors.yaml'}:3",
        "'capture_sizes[2]'": f"{BAD / 'many_errors.yaml'}:4",
    }


def test_oversized_file_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "huge.yaml"
    # Valid YAML, so only the size limit can reject it; a parser would take a while on 1 MiB of list.
    body = "mode: FULL\nseq_len_buckets:\n" + "  - 1\n" * (MAX_CONFIG_BYTES // 6 + 10)
    path.write_text(body, encoding="utf-8")
    assert path.stat().st_size > MAX_CONFIG_BYTES

    def parse_called(*args, **kwargs):
        raise AssertionError("an oversized file must not reach the parser")

    monkeypatch.setattr(config_files, "_parse", parse_called)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and str(MAX_CONFIG_BYTES) in message and "limited" in message


def test_file_at_the_size_limit_still_loads(tmp_path):
    path = tmp_path / "big_but_ok.yaml"
    head = "mode: PIECEWISE\n"
    path.write_text(head + "#" * (MAX_CONFIG_BYTES - len(head) - 1) + "\n", encoding="utf-8")
    assert path.stat().st_size == MAX_CONFIG_BYTES
    assert load_config(path).mode is CUDAGraphMode.PIECEWISE


def test_alias_bomb_is_refused_at_the_first_alias(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}:2: invalid YAML: YAML aliases \(\*a0\) are not allowed"):
        load_config(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="not found") as info:
        load_config(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path)


def test_valid_values_in_every_format(tmp_path):
    (tmp_path / "c.yml").write_text("mode: full_and_piecewise\nmemory_budget: 1 GiB\n", encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps({"mode": "Piecewise", "capture_sizes": [4, 2]}))
    (tmp_path / "c.toml").write_text('mode = "none"\nmax_cached_graphs = 3\n', encoding="utf-8")
    yml, js, toml = (load_config(tmp_path / f"c.{ext}") for ext in ("yml", "json", "toml"))
    assert yml.mode is CUDAGraphMode.FULL_AND_PIECEWISE and yml.memory_budget == 2**30
    assert js.mode is CUDAGraphMode.PIECEWISE and js.cudagraph_capture_sizes == (2, 4)
    assert toml.mode is CUDAGraphMode.NONE and toml.max_cached_graphs == 3 and toml.cudagraph_capture_sizes == ()


def test_save_refuses_unknown_extension(tmp_path):
    with pytest.raises(ConfigError, match="unknown config file extension"):
        save_config(CUDAGraphConfig(), tmp_path / "c.ini")
    assert not (tmp_path / "c.ini").exists()


# -- the shipped configs ---------------------------------------------------------------------------


def test_shipped_configs_exist():
    assert {p.name for p in SHIPPED} >= {"default.yaml", "serving.yaml", "small.yaml", "disabled.yaml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    assert isinstance(load_config(path), CUDAGraphConfig)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_config_matches_json_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.validate(data, CUDAGraphConfig.model_json_schema())


def test_default_yaml_spells_out_every_default():
    path = REPO / "configs" / "default.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(data) == list(CUDAGraphConfig.model_fields), "default.yaml must list every field, in order"
    assert load_config(path) == CUDAGraphConfig()


def test_serving_yaml_is_the_vllm_like_setup():
    config = load_config(REPO / "configs" / "serving.yaml")
    assert config.mode is CUDAGraphMode.FULL_AND_PIECEWISE
    assert config.uniform_decode_query_len == 1 and config.max_num_reqs is not None
    assert config.capture_sizes is not None and max(config.capture_sizes) <= 512
    assert config.max_num_reqs in config.cudagraph_capture_sizes  # the largest decode batch has a graph


def test_small_and_disabled_yaml():
    small = load_config(REPO / "configs" / "small.yaml")
    assert small.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 32)
    assert small.max_capture_size == 32 and small.memory_budget == 256 * 2**20
    assert small.max_cached_graphs is not None
    disabled = load_config(REPO / "configs" / "disabled.yaml")
    assert disabled.mode is CUDAGraphMode.NONE and disabled.cudagraph_capture_sizes == ()
    assert not disabled.should_use_cudagraph(1)


@pytest.mark.parametrize("path", [3, None, b"configs/default.yaml", ["configs/default.yaml"]])
def test_a_path_that_is_not_a_path_names_the_argument(path):
    """Regression: pathlib's TypeError ("expected str, bytes or os.PathLike object, not int") named nothing."""
    with pytest.raises(TypeError, match=rf"load_config: path must be a config file's path \(a str or "
                                        rf"os\.PathLike\), got {type(path).__name__}"):
        load_config(path)
    with pytest.raises(TypeError, match=r"save_config: path must be a config file's path"):
        save_config(CUDAGraphConfig(), path)
