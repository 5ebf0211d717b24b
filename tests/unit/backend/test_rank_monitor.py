"""RankMonitor (rank 0's view of the followers' heartbeats) with plain sockets: no mlx."""

from __future__ import annotations

import queue
import socket

from mlxd.backend.rank_monitor import RankMonitor


def _monitor(stall_seconds: float) -> tuple[RankMonitor, queue.SimpleQueue[str]]:
    faults: queue.SimpleQueue[str] = queue.SimpleQueue()
    return RankMonitor(3, faults.put, stall_seconds), faults


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
    monitor, faults = _monitor(stall_seconds=0.5)
    try:
        with socket.create_connection(("127.0.0.1", monitor.port)) as stranger:
            stranger.sendall(b"7\n")  # not a follower of a 3-rank job: no fault when it goes
        with socket.create_connection(("127.0.0.1", monitor.port)) as conn:
            conn.sendall(b"1\n")
            assert faults.get(timeout=10) == "rank 1 stalled: no heartbeat for 0.5s"
    finally:
        monitor.close()
