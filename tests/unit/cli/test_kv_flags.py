"""--kv-bits / --kv-group-size / --kv-key-bits / --kv-quant-start: one engine setting each,
for serve and the CLI's own engine."""

from __future__ import annotations

import argparse

import pytest

from mlxd.cli.client.model_client import server_of
from mlxd.cli.kv_flags import kv_overrides
from mlxd.cli.main import build_parser
from mlxd.errors import InvalidRequest


@pytest.mark.parametrize("command", ["serve", "run", "chat"])
def test_flags_become_engine_overrides(command: str) -> None:
    flags = ["--kv-bits", "8", "--kv-group-size", "32", "--kv-quant-start", "256"]
    args = build_parser([command]).parse_args([command, *flags, "--kv-key-bits", "16"])
    assert kv_overrides(args) == {
        "kv_bits": 8, "kv_group_size": 32, "kv_quant_start": 256, "kv_key_bits": 16,
    }  # fmt: skip
    assert kv_overrides(build_parser([command]).parse_args([command])) == {}


@pytest.mark.parametrize(
    "flags", [["--kv-bits", "3"], ["--kv-group-size", "16"], ["--kv-key-bits", "12"]]
)
def test_values_mlx_cannot_quantize_to_are_refused(flags: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser(["serve"]).parse_args(["serve", *flags])


def test_kv_bits_is_the_servers_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_SERVER", "localhost:1")
    args = argparse.Namespace(server=None, local=False, kv_bits=8)
    with pytest.raises(InvalidRequest, match="--kv-bits is the server's choice"):
        server_of(args)
    args = argparse.Namespace(server=None, local=False, kv_quant_start=64)
    with pytest.raises(InvalidRequest, match="--kv-quant-start is the server's choice"):
        server_of(args)
    args = argparse.Namespace(server=None, local=False, kv_key_bits=16)
    with pytest.raises(InvalidRequest, match="--kv-key-bits is the server's choice"):
        server_of(args)


def test_a_negative_quant_start_is_refused() -> None:
    from mlxd.engine import EngineConfig

    with pytest.raises(InvalidRequest, match="kv_quant_start"):
        EngineConfig.from_settings(kv_quant_start=-1)
