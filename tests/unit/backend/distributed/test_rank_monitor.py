"""RankMonitor (rank 0's view of the followers' heartbeats) and send_heartbeats (a
follower's view of rank 0) with plain sockets: no mlx."""

from __future__ import annotations

import json
import queue
import socket
import time
from pathlib import Path

import pytest

from mlxd.backend.distributed.rank_monitor import RankMonitor, leader_address, send_heartbeats


def _monitor(stall_seconds: float, size: int = 3) -> tuple[RankMonitor, queue.SimpleQueue[str]]:
    faults: queue.SimpleQueue[str] = queue.SimpleQueue()
    return RankMonitor(size, faults.put, stall_seconds), faults


def test_a_closed_connection_names_the_rank_once() -> None:
    monitor, faults = _monitor(stall_seconds=60)
    try:
        with socket.create_connection(("127.0.0.1", monitor.port)) as conn:
            conn.sendall(b"2\n.")
        assert faults.get(timeout=10) == "rank 2 is gone: its process exited or its link broke"
        assert monitor.fault is not None and faults.empty()
    finally:
        monitor.close()


def test_a_silent_rank_counts_as_stalled_and_strangers_are_ignored() -> None:
    monitor, faults = _monitor(stall_seconds=0.5, size=2)
    try:
        with socket.create_connection(("127.0.0.1", monitor.port)) as stranger:
            stranger.sendall(b"7\n")  # not a follower of a 3-rank job: no fault when it goes
        with socket.create_connection(("127.0.0.1", monitor.port)) as conn:
            conn.sendall(b"1\n")
            assert faults.get(timeout=10) == "rank 1 stalled: no heartbeat for 0.5s"
    finally:
        monitor.close()


def test_ranks_report_liveness_and_a_follower_hears_the_echo() -> None:
    monitor, faults = _monitor(stall_seconds=60, size=3)
    lost: queue.SimpleQueue[str] = queue.SimpleQueue()
    try:
        assert [(r.rank, r.up, r.heartbeat_age) for r in monitor.ranks()] == [
            (1, False, None),
            (2, False, None),
        ]
        send_heartbeats("127.0.0.1", monitor.port, 1, 2.0, lost.put)
        deadline = time.monotonic() + 10
        while not monitor.ranks()[0].up and time.monotonic() < deadline:
            time.sleep(0.05)
        first, second = monitor.ranks()
        assert first.up and first.heartbeat_age is not None and first.heartbeat_age < 60
        assert not second.up
        time.sleep(3.0)  # longer than the follower's stall bound: the echoes keep it calm
        assert lost.empty() and faults.empty()
    finally:
        monitor.close()


def test_a_never_connected_rank_is_named() -> None:
    monitor, faults = _monitor(stall_seconds=0.5, size=2)
    try:
        assert faults.get(timeout=10) == "rank 1 never connected to rank 0's heartbeat"
        assert [r.up for r in monitor.ranks()] == [False]
    finally:
        monitor.close()


def test_a_follower_learns_that_rank_0_is_gone_or_stalled() -> None:
    for close, expected in ((True, "rank 0 is gone"), (False, "rank 0 stalled")):
        lost: queue.SimpleQueue[str] = queue.SimpleQueue()
        with socket.create_server(("127.0.0.1", 0)) as leader:
            send_heartbeats("127.0.0.1", leader.getsockname()[1], 1, 0.5, lost.put)
            conn, _ = leader.accept()
            with conn:
                if close:
                    conn.close()
                assert lost.get(timeout=10).startswith(expected)


def test_a_follower_that_cannot_reach_rank_0_says_so() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    lost: queue.SimpleQueue[str] = queue.SimpleQueue()
    send_heartbeats("127.0.0.1", port, 1, 0.5, lost.put)
    assert lost.get(timeout=10).startswith("rank 0 is unreachable")


def test_rank_0_address_from_the_launcher_or_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MLXD_RANK0_ADDRESS", "MLX_JACCL_COORDINATOR", "MLX_HOSTFILE"):
        monkeypatch.delenv(name, raising=False)
    assert leader_address() is None  # MPI: nothing says
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([["10.0.0.1:5000"], ["10.0.0.2:5000"]]))
    monkeypatch.setenv("MLX_HOSTFILE", str(hostfile))  # ring
    assert leader_address() == "10.0.0.1"
    monkeypatch.setenv("MLX_JACCL_COORDINATOR", "10.0.0.7:32323")  # JACCL
    assert leader_address() == "10.0.0.7"
    monkeypatch.setenv("MLXD_RANK0_ADDRESS", "mac1.local")
    assert leader_address() == "mac1.local"
