"""Liveness of the other ranks of an `mlx.launch` job, seen from rank 0.

A collective on a broken ring may block forever, so rank 0 cannot learn from MLX alone that a
rank died or stalled. Each follower keeps one TCP connection to rank 0 and sends a heartbeat
byte every `HEARTBEAT_SECONDS`: a closed connection means that rank's process is gone, a
silence of `stall_seconds` means it (or its machine, or the link) stalled. Either way rank 0
learns it in bounded time and which rank it was. Rank 0 echoes each beat, so a follower
learns the same of rank 0 and exits instead of waiting in a collective forever. Liveness
only: no data crosses this socket.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable

from mlxd.backend.api import RankStatus
from mlxd.config import setting

HEARTBEAT_SECONDS = 0.5
DEFAULT_STALL_SECONDS = 10.0


def leader_address() -> str | None:
    """Rank 0's address as the other ranks reach it, or None when nothing says (the heartbeat
    is then off): MLXD_RANK0_ADDRESS, else what `mlx.launch` tells the ranks (the ring's
    hostfile, or the JACCL coordinator, which is rank 0). MPI tells neither."""
    explicit = setting("rank0_address")
    if explicit:
        return explicit
    coordinator = os.environ.get("MLX_JACCL_COORDINATOR", "")
    if coordinator:
        return coordinator.rsplit(":", 1)[0]
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
        self._failed_ranks: set[int] = set()
        self._started = time.monotonic()
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

    def ranks(self) -> tuple[RankStatus, ...]:
        """Every follower, in rank order: up until its connection closes or goes silent."""
        ages = self.alive()
        with self._lock:
            failed = set(self._failed_ranks)
        return tuple(
            RankStatus(rank, rank in ages and rank not in failed, ages.get(rank))
            for rank in range(1, self.size)
        )

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _failed(self, rank: int, detail: str) -> None:
        with self._lock:
            self._failed_ranks.add(rank)
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
                    self._failed(rank, f"rank {rank} is gone: its process exited or its link broke")
                    return
                with self._lock:
                    self._last_beat[rank] = time.monotonic()
                try:
                    conn.sendall(b".")  # the echo: rank 0 is alive
                except OSError:
                    pass  # the next recv says why

    def _watch(self) -> None:
        while not self._closed.wait(HEARTBEAT_SECONDS):
            ages = self.alive()
            for rank, silent in ages.items():
                if silent > self.stall_seconds:
                    self._failed(
                        rank, f"rank {rank} stalled: no heartbeat for {self.stall_seconds:g}s"
                    )
            if time.monotonic() - self._started > self.stall_seconds:
                for rank in set(range(1, self.size)) - ages.keys():
                    self._failed(rank, f"rank {rank} never connected to rank 0's heartbeat")


def send_heartbeats(
    host: str, port: int, rank: int, stall_seconds: float, on_lost: Callable[[str], None]
) -> None:
    """A follower's side: connect to rank 0 and beat until the process exits (daemon).
    `on_lost` gets one line when rank 0's echoes stop (gone, or silent `stall_seconds`)."""

    def beat() -> None:
        try:
            conn = socket.create_connection((host, port), timeout=stall_seconds)
        except OSError as exc:
            on_lost(f"rank 0 is unreachable at {host}:{port}: {exc.strerror or exc}")
            return
        last_echo = time.monotonic()
        with conn:
            conn.settimeout(HEARTBEAT_SECONDS)
            try:
                conn.sendall(f"{rank}\n".encode())
                while time.monotonic() - last_echo <= stall_seconds:
                    conn.sendall(b".")
                    try:
                        if not conn.recv(64):
                            break
                        last_echo = time.monotonic()
                        time.sleep(HEARTBEAT_SECONDS)
                    except TimeoutError:
                        pass  # waited a heartbeat period already
                else:
                    on_lost(f"rank 0 stalled: no heartbeat echo for {stall_seconds:g}s")
                    return
            except OSError:
                pass
        on_lost("rank 0 is gone: its process exited or its link broke")

    threading.Thread(target=beat, name="mlxd-heartbeat", daemon=True).start()
