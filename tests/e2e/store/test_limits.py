"""Hostile checkpoints through the real CLI: `health`, `show`, `list`, `pull` report them and
`run` refuses them before any load. Children run under a memory cap (tests.hostile), so a
regression that loads one fails here instead of exhausting the machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlxd.errors import ModelBroken
from tests.hostile import hostile_copy, memory_capped
from tests.integration.store.clirun import Result, cli_env, command, mlxd
from tests.integration.store.hubserver import FixtureRepo, HubServer


def capped(home: Path, *args: str, **env: str) -> Result:
    proc = subprocess.run(
        command(*args), env={**cli_env(home), **env}, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, preexec_fn=memory_capped(),
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def home(tmp_path: Path, tiny_chat_model: Path) -> Path:
    store = tmp_path / "mlxd" / "models"
    store.mkdir(parents=True)
    for how in ("layers", "layers_float", "huge_weights"):
        hostile_copy(tiny_chat_model, store / how, how)
    return tmp_path


@pytest.mark.parametrize("how", ["layers", "layers_float"])
def test_declared_layers_beyond_the_weights_are_broken(home: Path, how: str) -> None:
    health = mlxd(home, "health", how, "--json")
    assert health.code == ModelBroken.exit_code
    (report,) = health.json()
    assert report["status"] == "broken"
    codes = [p["code"] for p in report["problems"]]
    assert codes == ["config_mismatch"], report
    assert "num_hidden_layers" in report["problems"][0]["message"]
    listed = {e["id"]: e["status"] for e in mlxd(home, "list", "--json").json()}
    assert listed[how] == "broken"
    show = mlxd(home, "show", how)
    assert show.code == ModelBroken.exit_code and "num_hidden_layers" in show.stderr
    run = capped(home, "run", how, "hello", "--json")
    assert run.code == ModelBroken.exit_code, run.stderr
    assert "num_hidden_layers" in run.error()["message"]


def test_weights_larger_than_memory_are_too_large(home: Path) -> None:
    health = capped(home, "health", "huge_weights", "--json")
    assert health.code == ModelBroken.exit_code, health.stderr
    (report,) = health.json()
    assert report["status"] == "too_large"
    problem = next(p for p in report["problems"] if p["code"] == "too_large")
    assert "address-space limit" in problem["message"]
    run = capped(home, "run", "huge_weights", "hello", "--json")
    assert run.code == ModelBroken.exit_code
    assert run.error()["code"] == "model_too_large"
    relaxed = capped(home, "health", "huge_weights", "--json", MLXD_LOAD_MEMORY_FRACTION="0")
    assert "too_large" not in [p["code"] for p in relaxed.json()[0]["problems"]]


def test_pull_of_a_hostile_config_reports_it(tmp_path: Path, tiny_chat_model: Path) -> None:
    src = hostile_copy(tiny_chat_model, tmp_path / "src", "layers")
    with HubServer() as hub:
        hub.repos["org/hostile"] = FixtureRepo.from_dir(src)
        pulled = mlxd(tmp_path, "pull", "org/hostile", "--json", endpoint=hub.url)
    assert pulled.code == ModelBroken.exit_code, pulled.stderr
