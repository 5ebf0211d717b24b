"""The real `mlxd push` against the local test hub (a real HTTP server speaking the upload
API huggingface_hub calls): preflight, one commit, refusal to overwrite, resume after kill -9."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxd.errors import AuthError, InvalidRequest, ModelBroken
from tests.checkpoints import make_hf_checkpoint
from tests.integration.store.cachefixture import break_model
from tests.integration.store.clirun import Result, cli_env, command
from tests.integration.store.hubserver import HubServer

REPO = "tester/tiny-mlx"


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, hub: HubServer) -> Path:
    """A store holding 'tiny' (two weight shards) and a token saved as `hf auth login` does."""
    make_hf_checkpoint(tmp_path / "mlxd" / "models" / "tiny")
    (tmp_path / "hf").mkdir(exist_ok=True)
    (tmp_path / "hf" / "token").write_text(hub.token)
    return tmp_path


def push(home: Path, hub: HubServer, *args: str, **env: str) -> Result:
    proc = subprocess.run(command("push", *args), env=cli_env(home, hub.url) | env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def model_files(home: Path) -> dict[str, bytes]:
    folder = home / "mlxd" / "models" / "tiny"
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_push_creates_the_repo_and_uploads_every_file(home: Path, hub: HubServer) -> None:
    result = push(home, hub, "tiny", REPO, "--private", "--json")
    assert result.code == 0, result.stderr
    made = result.json()
    assert (made["repo_id"], made["created"], made["private"]) == (REPO, True, True)
    assert hub.repos[REPO].private and hub.repos[REPO].files == model_files(home)
    assert made["files"] == len(model_files(home)) and made["commit"] == hub.repos[REPO].commit
    assert hub.commits == [REPO]
    shards = [n for n in model_files(home) if n.endswith(".safetensors")]
    assert len(shards) == 2 and len(hub.lfs) == 2  # weights went as LFS objects


def test_an_existing_repo_with_files_needs_force(home: Path, hub: HubServer) -> None:
    assert push(home, hub, "tiny", REPO).code == 0
    again = push(home, hub, "tiny", REPO, "--json")
    assert again.code == InvalidRequest.exit_code
    assert "--force" in again.error()["message"] and hub.commits == [REPO]
    puts = _puts(hub)
    forced = push(home, hub, "tiny", REPO, "--force")
    assert forced.code == 0, forced.stderr
    assert _puts(hub) == puts  # nothing changed: no bytes sent, no empty commit
    assert hub.commits == [REPO]


def test_preflight_refusals_leave_the_hub_untouched(home: Path, hub: HubServer) -> None:
    (home / "hf" / "token").unlink()
    no_token = push(home, hub, "tiny", REPO, "--json")
    assert no_token.code == AuthError.exit_code and "HF_TOKEN" in no_token.error()["message"]
    bad_token = push(home, hub, "tiny", REPO, "--json", HF_TOKEN="hf_wrong")
    assert bad_token.code == AuthError.exit_code and "refused" in bad_token.error()["message"]
    bad_id = push(home, hub, "tiny", "not a repo", HF_TOKEN=hub.token)
    assert bad_id.code == InvalidRequest.exit_code and bad_id.stderr.count("\n") == 1
    break_model(home / "mlxd" / "models" / "tiny", "malformed_config")
    broken = push(home, hub, "tiny", REPO, "--json", HF_TOKEN=hub.token)
    assert broken.code == ModelBroken.exit_code, broken.stderr
    assert REPO not in hub.repos and hub.commits == []


def test_push_resumes_after_kill_9(home: Path, hub: HubServer) -> None:
    files = model_files(home)
    first, second = sorted(n for n in files if n.endswith(".safetensors"))
    oid = {n: hashlib.sha256(files[n]).hexdigest() for n in (first, second)}
    hub.hold_uploads.add(oid[second])  # its PUT never completes: the pusher is killed then
    proc = subprocess.Popen(command("push", "tiny", REPO), env=cli_env(home, hub.url),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait(lambda: hub.half_sent.is_set() and oid[first] in hub.lfs, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    hub.hold_uploads.clear()
    hub.release.set()
    assert hub.commits == [] and hub.repos[REPO].files == {}  # created, nothing committed
    again = push(home, hub, "tiny", REPO, "--json")  # no --force: the repo holds no files
    assert again.code == 0, again.stderr
    assert hub.repos[REPO].files == files and hub.commits == [REPO]
    assert _puts(hub).count(f"/lfs/{oid[first]}") == 1  # uploaded once, not again
    assert _puts(hub).count(f"/lfs/{oid[second]}") == 2  # the killed one, then the resumed one


def _puts(hub: HubServer) -> list[str]:
    return [path for method, path, _ in hub.requests if method == "PUT"]


def _wait(done: object, proc: subprocess.Popen[bytes]) -> None:
    assert callable(done)
    deadline = time.monotonic() + 120
    while not done():
        assert proc.poll() is None, f"push ended before it could be killed: {proc.returncode}"
        assert time.monotonic() < deadline, "push never got to its held upload"
        time.sleep(0.02)
