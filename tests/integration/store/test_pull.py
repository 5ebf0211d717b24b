"""`mlxd pull` against a real HTTP hub on 127.0.0.1 (HF_ENDPOINT), via the real CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from mlxd.errors import DownloadError, InvalidRequest, ModelNotFound, ModelRefused
from tests.integration.store.clirun import cli_env, command, mlxd
from tests.integration.store.hubserver import FixtureRepo, HubServer
from tests.signals import default_sigint

EXTRAS = {"modeling_evil.py": b"import os\n", "pytorch_model.bin": b"\x80\x04pickle",
          "README.md": b"# tiny\n"}  # fmt: skip


@pytest.fixture
def hub(tiny_chat_model: Path):
    server = HubServer()
    server.repos["org/tiny"] = FixtureRepo.from_dir(tiny_chat_model, EXTRAS)
    with server:
        yield server


def repo_dir(home: Path, repo_id: str) -> Path:
    return home / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))


def test_pull_success_downloads_only_model_files(hub: HubServer, tmp_path: Path) -> None:
    result = mlxd(tmp_path, "pull", "org/tiny", "--json", endpoint=hub.url)
    assert result.code == 0, result.stderr
    data = result.json()
    commit = hub.repos["org/tiny"].commit
    assert data["revision"] == commit and data["health"]["status"] == "ok"
    snapshot = Path(data["path"])
    assert snapshot == repo_dir(tmp_path, "org/tiny") / "snapshots" / commit
    names = sorted(p.name for p in snapshot.iterdir())
    assert names == sorted(n for n in hub.repos["org/tiny"].files if n not in EXTRAS)
    for name in names:
        assert (snapshot / name).read_bytes() == hub.repos["org/tiny"].files[name]
    assert (repo_dir(tmp_path, "org/tiny") / "refs" / "main").read_text() == commit
    listed = mlxd(tmp_path, "list", "--json").json()
    assert [(e["id"], e["status"]) for e in listed] == [("org/tiny", "ok")]
    again = mlxd(tmp_path, "pull", "org/tiny", endpoint=hub.url)  # idempotent
    assert again.code == 0 and "pulled org/tiny" in again.stdout


def test_pull_resumes_after_dropped_connection(
    hub: HubServer, tmp_path: Path, tiny_chat_model: Path
) -> None:
    # Bigger than huggingface_hub's 10 MiB read chunk, so bytes land before the drop.
    big = _safetensors_blob(24 << 20)
    hub.repos["org/big"] = FixtureRepo.from_dir(tiny_chat_model, {"padding.safetensors": big})
    hub.drop_once.add("padding.safetensors")
    result = mlxd(tmp_path, "pull", "org/big", "--json", endpoint=hub.url)
    assert result.code == 0, result.stderr
    gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith("/padding.safetensors")]
    assert len(gets) == 2 and gets[0][2] is None
    assert gets[1][2] is not None and gets[1][2].startswith("bytes=")
    assert int(gets[1][2][len("bytes=") :].split("-")[0]) > 0  # resumed, not restarted
    assert (Path(result.json()["path"]) / "padding.safetensors").read_bytes() == big


@pytest.mark.parametrize("status", [401, 403])
def test_gated_repo_fails_fast_and_leaves_nothing(
    hub: HubServer, tmp_path: Path, tiny_chat_model: Path, status: int
) -> None:
    """The hub lists a gated repo's metadata publicly and refuses only its files: the
    preflight reads the `gated` field and HEADs one file, and writes nothing (no trees/*.json,
    no blobs, no locks) when access is denied."""
    hub.repos["org/gated"] = FixtureRepo.from_dir(tiny_chat_model, gated=status)
    result = mlxd(tmp_path, "pull", "org/gated", "--json", endpoint=hub.url)
    assert result.code == DownloadError.exit_code
    assert "gated" in result.error()["message"]
    assert not repo_dir(tmp_path, "org/gated").exists()
    assert not list((tmp_path / "hf").rglob("*gated*"))
    resolves = [r for r in hub.requests if r[1].startswith("/org/gated/resolve")]
    assert [r[0] for r in resolves] == ["HEAD"]  # one HEAD, never a download


def test_missing_repo_and_revision(hub: HubServer, tmp_path: Path) -> None:
    result = mlxd(tmp_path, "pull", "org/missing", endpoint=hub.url)
    assert result.code == ModelNotFound.exit_code
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr
    assert not repo_dir(tmp_path, "org/missing").exists()
    result = mlxd(tmp_path, "pull", "org/tiny@nope", "--json", endpoint=hub.url)
    assert result.code == ModelNotFound.exit_code and "nope" in result.error()["message"]
    assert not repo_dir(tmp_path, "org/tiny").exists()


def test_repo_escaping_the_cache_is_refused(
    hub: HubServer, tmp_path: Path, tiny_chat_model: Path
) -> None:
    hub.repos["org/evil"] = FixtureRepo.from_dir(tiny_chat_model, {"../../evil.json": b"{}"})
    result = mlxd(tmp_path, "pull", "org/evil", "--json", endpoint=hub.url)
    assert result.code == ModelRefused.exit_code
    assert "outside its folder" in result.error()["message"]
    assert not repo_dir(tmp_path, "org/evil").exists()
    assert not list(tmp_path.rglob("evil.json"))


def test_pickle_only_repo_is_refused(hub: HubServer, tmp_path: Path) -> None:
    hub.repos["org/pickles"] = FixtureRepo(files={"config.json": b"{}", "pytorch_model.bin": b"x"})
    result = mlxd(tmp_path, "pull", "org/pickles", endpoint=hub.url)
    assert result.code == ModelRefused.exit_code and "pickle" in result.stderr
    assert not repo_dir(tmp_path, "org/pickles").exists()


@pytest.mark.parametrize("bad", ["../x", "org/na..me", "org/x@../../y"])  # more: unit tests
def test_invalid_repo_id_makes_no_network_call(hub: HubServer, tmp_path: Path, bad: str) -> None:
    result = mlxd(tmp_path, "pull", bad, "--json", endpoint=hub.url)
    assert result.code == InvalidRequest.exit_code
    assert result.error()["code"] == "invalid_request"
    assert hub.requests == []


def test_network_failure_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = mlxd(tmp_path, "pull", "org/tiny", endpoint=f"http://127.0.0.1:{port}")
    assert result.code == DownloadError.exit_code
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"cannot reach the hub at http://127.0.0.1:{port}" in result.stderr


@pytest.mark.parametrize("damage_partial", [False, True])
def test_ctrl_c_exits_130_and_next_pull_resumes(
    hub: HubServer, tmp_path: Path, tiny_chat_model: Path, damage_partial: bool
) -> None:
    big = _safetensors_blob(24 << 20)  # > 10 MiB: huggingface_hub writes 10 MiB chunks
    hub.repos["org/big"] = FixtureRepo.from_dir(tiny_chat_model, {"padding.safetensors": big})
    hub.hold.add("padding.safetensors")
    folder = repo_dir(tmp_path, "org/big")
    proc = subprocess.Popen(command("pull", "org/big"), env=cli_env(tmp_path, hub.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)  # fmt: skip
    try:
        assert hub.half_sent.wait(60), "the download never started"
        others = set(hub.repos["org/big"].files) - {"padding.safetensors"}
        _wait_until(lambda: {p.name for p in folder.glob("snapshots/*/*")} >= others)
        _wait_until(lambda: any(p.stat().st_size for p in folder.glob("blobs/*.incomplete")))
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert stderr.count("\n") == 1 and "interrupted" in stderr
    listed = {e["id"]: e for e in mlxd(tmp_path, "list", "--json").json()}
    assert listed["org/big"]["status"] == "incomplete"
    health = mlxd(tmp_path, "health", "org/big", "--json")
    assert health.code != 0 and json.loads(health.stdout)[0]["status"] == "incomplete"
    (partial,) = folder.glob("blobs/*.incomplete")
    kept = partial.stat().st_size
    if damage_partial:  # resumed bytes that fail the sha256 check are thrown away
        partial.write_bytes(b"\xff" * partial.stat().st_size)

    hub.hold.clear()
    hub.release.set()
    before = len(hub.requests)
    result = mlxd(tmp_path, "pull", "org/big", "--json", endpoint=hub.url)
    assert result.code == 0, result.stderr
    assert result.json()["health"]["status"] == "ok"
    assert (Path(result.json()["path"]) / "padding.safetensors").read_bytes() == big
    assert not list(folder.glob("blobs/*.incomplete"))
    gets = [r for r in hub.requests[before:] if r[0] == "GET" and "/resolve/" in r[1]]
    assert {r[1].rsplit("/", 1)[-1] for r in gets} == {"padding.safetensors"}  # others kept
    ranges = [r[2] for r in gets]
    if damage_partial:
        assert ranges[-1] is None  # fetched afresh
    else:
        assert ranges == [f"bytes={kept}-"] and kept > 0  # resumed where it stopped


def _wait_until(condition, timeout: float = 60) -> None:
    """Poll a condition (not a timing assertion: the limit only guards against hangs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition never held")


def _safetensors_blob(n: int) -> bytes:
    header = json.dumps({"pad": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    return struct.pack("<Q", len(header)) + header + os.urandom(n)
