"""config.SETTINGS: each setting's parser turns its text into its value, once, for every reader."""

from __future__ import annotations

import pytest

from mlxd.config import SETTINGS, setting, setting_flag, setting_float, setting_int
from mlxd.engine import EngineConfig
from mlxd.errors import InvalidRequest


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_default_parses(name: str) -> None:
    s = SETTINGS[name]
    assert s.default_value() == s.parse(s.default)


def test_values_come_typed_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_MAX_BATCH", "7")
    monkeypatch.setenv("MLXD_WATCHDOG_SECONDS", "1.5")
    monkeypatch.setenv("MLXD_ALLOW_IMAGE_URLS", "1")
    assert setting_int("max_batch") == 7 and setting("max_batch") == "7"
    assert setting_float("watchdog_seconds") == 1.5
    assert setting_flag("allow_image_urls") is True
    assert SETTINGS["max_tokens_ceiling"].value() is None  # 0: no ceiling
    assert SETTINGS["model_ttl_seconds"].parse("5m") == 300.0


def test_a_reader_asking_another_type_is_a_bug() -> None:
    with pytest.raises(TypeError, match="max_batch"):
        setting_float("max_batch")


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_MAX_BATCH", "many")
    with pytest.raises(ValueError, match="MLXD_MAX_BATCH"):
        setting_int("max_batch")
    with pytest.raises(InvalidRequest, match="MLXD_MAX_BATCH"):
        EngineConfig.from_settings()


def test_engine_config_defaults_are_the_settings() -> None:
    cfg = EngineConfig()
    assert cfg.max_batch == SETTINGS["max_batch"].default_value()
    assert cfg.stream_interval_s == SETTINGS["stream_interval_ms"].default_value() / 1000
    assert cfg.max_tokens_ceiling is None and cfg.model_ttl_seconds == 0.0
    assert EngineConfig.from_settings() == cfg
