"""A misspelt name (a config field, a ``jit`` option) is refused with the closest valid name suggested,
wherever it is written: Python keywords, a dict, a config file."""

from __future__ import annotations

import json

import pytest

from cupygraph.config.files import load_config
from cupygraph.config.model import CUDAGraphConfig
from cupygraph.errors import ConfigError


@pytest.mark.parametrize("typo, meant", [
    ("capture_size", "capture_sizes"), ("num_warmup", "num_warmups"), ("Mode", "mode"),
    ("max_graphs", "max_cached_graphs"), ("evicton", "eviction"),
])
def test_unknown_config_field_suggests_the_closest_field(typo, meant):
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(**{typo: 1})
    message = str(info.value)
    assert f"field '{typo}': unknown field; did you mean '{meant}'?" in message, message
    assert "valid fields: mode, capture_sizes" in message, message


def test_unknown_config_field_far_from_every_field_suggests_nothing():
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig.from_dict({"zzzz": 1})
    assert "did you mean" not in str(info.value) and "valid fields: mode" in str(info.value)


def test_unknown_field_in_a_file_suggests_with_its_line(tmp_path):
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"mode": "FULL", "capture_size": [1, 2]}, indent=1), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}:3: field 'capture_size': unknown field; did you mean 'capture_sizes'?" in str(info.value)


@pytest.mark.parametrize("typo, meant", [
    ("batch_argnum", "batch_argnums"), ("static_args", "static_argnums"), ("Config", "config"),
    ("out_batch", "out_batched"),
])
def test_unknown_jit_option_names_jit_and_suggests_the_closest_option(typo, meant):
    import cupygraph as cg

    for make in (lambda: cg.jit(lambda x: x, **{typo: 0}), lambda: cg.jit(**{typo: 0})):
        with pytest.raises(TypeError) as info:
            make()
        message = str(info.value)
        assert f"jit() got an unknown option '{typo}'; did you mean '{meant}'?" in message, message
        assert "options: config, batch_argnums, static_argnums" in message, message
