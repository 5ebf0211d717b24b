"""Liveness of the other ranks of an `mlx.launch` job, seen from rank 0.

A collective on a broken ring may block forever, so rank 0 cannot learn from MLX alone that a
rank died or stalled. Each follower keeps one TCP connection to rank 0 and sends a heartbeat
byte every `HEARTBEAT_SECONDS`: a closed connection means that rank's process is gone, a
silence of `stall_seconds` means it (or its machine, or the link) stalled. Either way rank 0
learns it in bounded time and which rank it was. Liveness only: no data crosses this socket.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable

HEARTBEAT_SECONDS = 0.5
DEFAULT_STALL_SECONDS = 10.0


def leader_address() -> str | None:
    """Rank 0's address on the ring's link (MLX_HOSTFILE, written by `mlx.launch`), or None
    for backends that do not say (the heartbeat is then off)."""
    path = os.environ.get("MLX_HOSTFILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            hosts = json.load(f)
        return str(hosts[0][0]).rsplit(":", 1)[0]
    except (OSError, ValueError, IndexError, TypeError):
        return None


class RankMonitor:
    """Rank 0's side: accepts one heartbeat connection per follower and calls `on_fault` once,
    with a line naming the rank, when a connection closes or goes silent."""

    def __init__(
        self,
        size: int,
        on_fault: Callable[[str], None],
        stall_seconds: float = DEFAULT_STALL_SECONDS,
    ) -> None:
        self.size = size
        self.stall_seconds = stall_seconds
        self._on_fault = on_fault
        self._lock = threading.Lock()
        self._last_beat: dict[int, float] = {}
        self.fault: str | None = None
        self._listener = socket.create_server(("", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        for target in (self._accept, self._watch):
            threading.Thread(target=target, name="mlxd-rank-monitor", daemon=True).start()

    def alive(self) -> dict[int, float]:
        """Seconds since each connected follower's last heartbeat."""
        now = time.monotonic()
        with self._lock:
            return {rank: now - seen for rank, seen in sorted(self._last_beat.items())}

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _failed(self, detail: str) -> None:
        with self._lock:
            if self.fault is not None or self._closed.is_set():
                return
            self.fault = detail
        self._on_fault(detail)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(
                target=self._read, args=(conn,), name="mlxd-rank-beat", daemon=True
            ).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            hello = conn.recv(16).split(b"\n", 1)[0]
            if not hello.isdigit() or not 0 < int(hello) < self.size:
                return  # not one of ours
            rank = int(hello)
            with self._lock:
                self._last_beat[rank] = time.monotonic()
            while True:
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
                if not data:
                    self._failed(f"rank {rank} is gone: its process exited or its link broke")
                    return
                with self._lock:
                    self._last_beat[rank] = time.monotonic()

    def _watch(self) -> None:
        while not self._closed.wait(HEARTBEAT_SECONDS):
            for rank, silent in self.alive().items():
                if silent > self.stall_seconds:
                    self._failed(f"rank {rank} stalled: no heartbeat for {self.stall_seconds:g}s")


def send_heartbeats(host: str, port: int, rank: int) -> None:
    """A follower's side: connect to rank 0 and beat until the process exits (daemon)."""

    def beat() -> None:
        try:
            conn = socket.create_connection((host, port), timeout=10)
            conn.sendall(f"{rank}\n".encode())
            while True:
                time.sleep(HEARTBEAT_SECONDS)
                conn.sendall(b".")
        except OSError:
            return  # rank 0 is gone: the ring tells this rank soon enough

    threading.Thread(target=beat, name="mlxd-heartbeat", daemon=True).start()
