"""Store entries that are symlinks, or that hold symlinks, are never followed out of the store
by `list`, `health` or `rm` (real CLI, real links)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlxd.errors import ModelBroken
from tests.integration.store.clirun import mlxd


@pytest.fixture
def home(tmp_path: Path, tiny_chat_model: Path) -> Path:
    """A store with: `linked` (a symlink to a model outside the store), `leaky` (a model whose
    config.json links outside and which holds a link to /), and `fine`."""
    store = tmp_path / "mlxd" / "models"
    store.mkdir(parents=True)
    outside = tmp_path / "outside"
    shutil.copytree(tiny_chat_model, outside / "model")
    (outside / "precious.txt").write_text("keep me")
    (store / "linked").symlink_to(outside / "model")
    leaky = shutil.copytree(tiny_chat_model, store / "leaky")
    (leaky / "config.json").unlink()
    (leaky / "config.json").symlink_to(outside / "model" / "config.json")
    (leaky / "root").symlink_to("/")  # a walk that followed it would read the whole disk
    shutil.copytree(tiny_chat_model, store / "fine")
    return tmp_path


def problems(home: Path, name: str) -> dict[str, str]:
    result = mlxd(home, "health", name, "--json")
    assert result.code == ModelBroken.exit_code, result.stdout
    (report,) = result.json()
    return {p["code"]: p["message"] for p in report["problems"]}


def test_list_and_health_do_not_follow_links_out_of_the_store(home: Path) -> None:
    listed = {e["id"]: e for e in mlxd(home, "list", "--json").json()}
    assert listed["fine"]["status"] == "ok"
    assert listed["linked"]["status"] == "broken" and listed["linked"]["size"] == 0
    assert [p["code"] for p in listed["linked"]["problems"]] == ["outside_store"]
    assert listed["leaky"]["status"] == "broken"
    assert "outside_store" in problems(home, "linked")
    leaky = problems(home, "leaky")
    assert "outside_store" in leaky and "config.json" in leaky["outside_store"]


def test_rm_of_a_linked_entry_removes_only_the_link(home: Path) -> None:
    store = home / "mlxd" / "models"
    result = mlxd(home, "rm", "linked", "--yes", "--json")
    assert result.code == 0, result.stderr
    assert not (store / "linked").exists() and not (store / "linked").is_symlink()
    assert [p.name for p in store.iterdir() if p.name.startswith(".")] == []  # no trash left
    assert (home / "outside" / "precious.txt").read_text() == "keep me"
    assert (home / "outside" / "model" / "config.json").exists()
    assert json.loads(result.stdout)["removed"]["size"] == 0


def test_rm_of_an_entry_holding_links_keeps_their_targets(home: Path) -> None:
    assert mlxd(home, "rm", "leaky", "--yes").code == 0
    assert (home / "outside" / "model" / "config.json").exists()
    assert not (home / "mlxd" / "models" / "leaky").exists()
