"""A rank of `mlx.launch -n 2 --backend ring` dies (SIGKILL) or stalls (SIGSTOP) mid-stream:
rank 0 notices (backend.rank_monitor), the stream ends with an error event naming the rank,
/health and new requests get 503, and rank 0 exits 1 when the job stops. Rank 0 dies or
stalls: rank 1 exits on its own (no echo of its heartbeat), with the launcher stopped too so
that only mlxd's heartbeat can end it. Nothing may hang: each job runs in its own process
group, killed in a `finally`."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env, wait_for
from tests.e2e.server.test_distributed import _ring

pytestmark = pytest.mark.timeout(180)

STREAM = {
    "model": "default",
    "prompt": "Hello",
    "max_tokens": 1500,
    "temperature": 0,
    "ignore_eos": True,
    "stream": True,
}


def _rank_pid(job: ServerProcess, rank: int) -> int:
    """The pid of `rank` among the launcher's process group (MLX_RANK in its environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != job.proc.pid:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if (
            f"MLX_RANK={rank}".encode() in env
            and b"mlxd.cli.main" in (entry / "cmdline").read_bytes()
        ):
            return int(entry.name)
    raise AssertionError(f"no rank {rank} process")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def job(tiny_chat_model: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    env = server_env(tmp_path, MLXD_RANK_STALL_SECONDS="2")
    srv = launch(
        ["--model", str(tiny_chat_model), "--shard", "tensor"],
        env,
        preexec_fn=os.setpgrp,
        launcher=[*_ring(2), "--python", sys.executable],
    )
    try:
        yield srv
    finally:
        try:  # resume a stopped rank too, so nothing of the job lingers
            os.killpg(srv.proc.pid, signal.SIGCONT)
            os.killpg(srv.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        srv.proc.wait(timeout=30)


def _stream_then(job: ServerProcess, act: int, rank_pid: int) -> list[dict[str, object]]:
    """Stream a long completion, send `act` to the rank after a few chunks; the events."""
    events: list[dict[str, object]] = []
    with httpx.stream("POST", job.base_url + "/completions", json=STREAM, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[len("data: ") :]))
            if len(events) == 5:
                os.kill(rank_pid, act)
    return events


def _error_of(events: list[dict[str, object]]) -> str:
    errors = [e["error"] for e in events if "error" in e]
    assert len(errors) == 1, events[-3:]
    error = errors[0]
    assert isinstance(error, dict)
    return str(error["message"])


def test_dead_rank_ends_streams_with_its_name_and_rank_0_exits(job: ServerProcess) -> None:
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    events = _stream_then(job, signal.SIGKILL, rank1)
    assert "rank 1 is gone" in _error_of(events)
    assert len(events) < STREAM["max_tokens"]  # type: ignore[operator]
    # mlx.launch stops the job when a rank exits non-zero: rank 0 exits 1 instead of hanging.
    wait_for(lambda: not _alive(rank0), "rank 0 to exit", timeout=60)
    job.proc.wait(timeout=60)
    stderr = "".join(job.stderr)
    assert "mlxd serve: rank 1 is gone" in stderr
    assert "Node with rank 0 exited with code 1" in stderr


def test_stalled_rank_fails_streams_health_and_new_requests(job: ServerProcess) -> None:
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    events = _stream_then(job, signal.SIGSTOP, rank1)
    assert "rank 1 stalled" in _error_of(events)
    health = httpx.get(job.url + "/health", timeout=10)
    assert health.status_code == 503
    assert health.json()["state"] == "failed"
    assert "rank 1 stalled" in health.json()["detail"]
    assert [(r["rank"], r["up"]) for r in health.json()["ranks"]] == [(0, True), (1, False)]
    assert metric(httpx.get(job.url + "/metrics", timeout=10).text, 'mlxd_rank_up{rank="1"}') == 0
    body = {"model": "default", "prompt": "Hi", "max_tokens": 4}
    refused = httpx.post(job.base_url + "/completions", json=body, timeout=10)
    assert refused.status_code == 503
    assert "rank 1 stalled" in refused.json()["error"]["message"]
    # Rank 0 stays up answering 503 until the job stops; then it exits 1, without hanging.
    assert _alive(rank0)
    os.kill(rank1, signal.SIGCONT)
    os.kill(rank0, signal.SIGTERM)
    wait_for(lambda: not _alive(rank0), "rank 0 to exit", timeout=60)


def test_rank_1_leaves_on_its_own_when_rank_0_dies(job: ServerProcess) -> None:
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    os.kill(job.proc.pid, signal.SIGSTOP)  # the launcher cannot stop the job for us
    os.kill(rank0, signal.SIGKILL)
    wait_for(lambda: not _alive(rank1), "rank 1 to exit", timeout=60)
    os.kill(job.proc.pid, signal.SIGCONT)
    job.proc.wait(timeout=60)
    wait_for(lambda: "rank 1 exited" in "".join(job.stderr), "the launcher's report", 10)
    # Whichever tells first: the heartbeat's closed connection or the ring's own socket. The
    # launcher relays rank 1's line on its own, or (stopped while rank 1 wrote it) inside its
    # report of rank 1's exit: find the line wherever it starts.
    lines = re.findall(r"mlxd serve \(rank 1\): [^\n]*", "".join(job.stderr))
    assert len(lines) == 1, job.stderr[-20:]
    assert "rank 0 is gone" in lines[0] or "[ring] connection to a peer was lost" in lines[0]
    assert "Traceback" not in "".join(job.stderr)


def test_rank_1_leaves_on_its_own_when_rank_0_stalls(job: ServerProcess) -> None:
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    os.kill(rank0, signal.SIGSTOP)
    wait_for(lambda: not _alive(rank1), "rank 1 to exit", timeout=60)
    wait_for(lambda: "rank 0 stalled" in "".join(job.stderr), "rank 1's last line", 10)
    assert "mlxd serve (rank 1): rank 0 stalled: no heartbeat echo for 2s" in "".join(job.stderr)


def test_a_drained_stop_is_no_fault(job: ServerProcess) -> None:
    """SIGTERM to rank 0: it drains and sends the stop; neither side then takes the other's
    leaving for a fault (both exit 0)."""
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    os.kill(rank0, signal.SIGTERM)
    wait_for(lambda: not _alive(rank0) and not _alive(rank1), "both ranks to exit", 60)
    assert job.proc.wait(timeout=60) == 0
    stderr = "".join(job.stderr)
    assert "exited with code" not in stderr and "is gone" not in stderr, stderr[-2000:]


def test_the_ranks_leave_when_the_launcher_is_killed(job: ServerProcess) -> None:
    """mlx.launch has no SIGTERM handler: a service manager stopping it alone (or SIGKILL)
    used to leave both ranks serving. Each rank now gets SIGTERM when its launcher exits."""
    rank0, rank1 = _rank_pid(job, 0), _rank_pid(job, 1)
    os.kill(job.proc.pid, signal.SIGKILL)
    wait_for(lambda: not _alive(rank0) and not _alive(rank1), "both ranks to exit", 60)
