"""Downloads are verified against the hub's checksums (LFS sha256 for weights, the git blob
id for other files), and `health --verify` re-checks a model on demand. Real CLI, real
HTTP hub on 127.0.0.1 (tests/integration/store/hubserver.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.errors import DownloadError, ModelBroken
from tests.integration.store.clirun import mlxd
from tests.integration.store.hubserver import FixtureRepo, HubServer


@pytest.fixture
def hub(tiny_chat_model: Path):
    server = HubServer()
    server.repos["org/tiny"] = FixtureRepo.from_dir(tiny_chat_model)
    with server:
        yield server


def snapshot(home: Path, repo: FixtureRepo) -> Path:
    return home / "hf" / "hub" / "models--org--tiny" / "snapshots" / repo.commit


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer_config.json"])
def test_a_file_corrupted_in_transit_fails_the_pull(
    hub: HubServer, tmp_path: Path, name: str
) -> None:
    hub.corrupt.add(name)  # right size, right headers, one byte flipped
    result = mlxd(tmp_path, "pull", "org/tiny", "--json", endpoint=hub.url)
    assert result.code == DownloadError.exit_code, result.stdout
    message = result.error()["message"]
    assert name in message and "checksum" in message
    snap = snapshot(tmp_path, hub.repos["org/tiny"])
    assert not (snap / name).exists()  # the bad copy is gone, nothing runs it
    listed = {e["id"]: e["status"] for e in mlxd(tmp_path, "list", "--json").json()}
    assert listed["org/tiny"] == "incomplete"
    hub.corrupt.clear()  # the next pull fetches it again and succeeds
    again = mlxd(tmp_path, "pull", "org/tiny", "--json", endpoint=hub.url)
    assert again.code == 0, again.stderr
    assert (snap / name).read_bytes() == hub.repos["org/tiny"].files[name]


def test_health_verify_rechecks_on_demand(hub: HubServer, tmp_path: Path) -> None:
    assert mlxd(tmp_path, "pull", "org/tiny", endpoint=hub.url).code == 0
    verified = mlxd(tmp_path, "health", "org/tiny", "--verify", "--json")
    assert verified.code == 0, verified.stdout
    weights = snapshot(tmp_path, hub.repos["org/tiny"]) / "model.safetensors"
    blob = weights.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # bit rot: same size, headers still consistent
    blob.write_bytes(bytes(data))
    assert mlxd(tmp_path, "health", "org/tiny", "--json").code == 0  # cheap checks pass
    checked = mlxd(tmp_path, "health", "org/tiny", "--verify", "--json")
    assert checked.code == ModelBroken.exit_code
    (report,) = checked.json()
    assert report["status"] == "broken"
    (problem,) = report["problems"]
    assert problem["code"] == "checksum_mismatch" and "model.safetensors" in problem["message"]
