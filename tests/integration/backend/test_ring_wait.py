"""backend.ring_wait: the ring's sockets (found by the hostfile's ports) turn blocking with a
timeout, nothing else does; off with 0, under JACCL, without a hostfile. Real sockets on
127.0.0.1; then a real 2-rank ring job (`mlx.launch -n 2 --backend ring`): after
`init_group` the ring's sockets block, and all_sums of every size the model uses (a decode
row, a prefill chunk large enough that MLX runs it both ways round the ring, so one socket
thread holds a recv and a send at once) still give the right sums."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxd.backend.ring_wait import ring_ports, ring_sockets, wait_in_kernel

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ring_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, int, int]]:
    """(accepted fd, connected fd, an unrelated connected fd), the hostfile naming the first
    pair's listening port, as mlx.launch writes one for a ring."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    other_listener = socket.create_server(("127.0.0.1", 0))
    other = socket.create_connection(other_listener.getsockname())
    other_accepted, _ = other_listener.accept()
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"], ["127.0.0.1:1"]]))
    monkeypatch.setenv("MLX_HOSTFILE", str(hostfile))
    monkeypatch.delenv("MLX_JACCL_COORDINATOR", raising=False)
    for s in (accepted, client, other):
        s.setblocking(False)  # as MLX leaves its ring sockets
    yield accepted.fileno(), client.fileno(), other.fileno()
    for s in (listener, client, accepted, other_listener, other, other_accepted):
        s.close()


def _blocks(fd: int) -> bool:
    return not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK


def _recv_timeout(fd: int) -> float:
    sock = socket.socket(fileno=os.dup(fd))
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.calcsize("ll"))
    finally:
        sock.close()
    seconds, micros = struct.unpack("ll", raw)
    return seconds + micros / 1e6


def test_the_hostfile_names_the_ring_ports(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([["10.0.0.1:5000", "10.0.0.1:5001"], ["10.0.0.2:5000"]]))
    assert ring_ports(str(hostfile)) == {5000, 5001}
    hostfile.write_text("not json")
    assert ring_ports(str(hostfile)) == set()
    assert ring_ports(str(tmp_path / "missing.json")) == set()


def test_only_the_ring_sockets_turn_blocking(ring_pair: tuple[int, int, int]) -> None:
    accepted, client, other = ring_pair
    port = ring_ports(os.environ["MLX_HOSTFILE"])
    assert sorted(ring_sockets(port)) == sorted([accepted, client])
    assert wait_in_kernel(0.002) == 2
    for fd in (accepted, client):
        assert _blocks(fd)
        assert 0.002 <= _recv_timeout(fd) <= 0.012  # Linux rounds it up to its clock tick
    assert not _blocks(other)
    # A blocked recv with nothing to read gives up after the timeout, as MLX's loop expects.
    sock = socket.socket(fileno=os.dup(client))
    try:
        with pytest.raises(BlockingIOError):
            sock.recv(1)
    finally:
        sock.close()


@pytest.mark.parametrize("case", ["zero", "jaccl", "no_hostfile"])
def test_nothing_changes_when_off(
    ring_pair: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    seconds = 0.0 if case == "zero" else 0.001
    if case == "jaccl":
        monkeypatch.setenv("MLX_JACCL_COORDINATOR", "127.0.0.1:1")
    if case == "no_hostfile":
        monkeypatch.delenv("MLX_HOSTFILE")
    assert wait_in_kernel(seconds) == 0
    assert not any(_blocks(fd) for fd in ring_pair)


def test_the_setting_gives_the_default(
    ring_pair: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLXD_RING_WAIT_MS", "3")
    assert wait_in_kernel() == 2
    assert 0.003 <= _recv_timeout(ring_pair[0]) <= 0.013


JOB = """
import fcntl, json, os, sys
import mlxd.backend
from mlxd.backend import distributed, ring_wait
import mlx.core as mx
group = distributed.init_group()
fds = ring_wait.ring_sockets(ring_wait.ring_ports(os.environ["MLX_HOSTFILE"]))
blocking = [not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in fds]
sums = []
for n in (1, 8 * 64, 300 * 1024):  # a scalar, a decode row, > 1 MB: both ways round the ring
    x = mx.arange(n, dtype=mx.float32) * (group.rank() + 1)
    got = mx.distributed.all_sum(x, group=group)
    sums.append(bool(mx.array_equal(got, mx.arange(n, dtype=mx.float32) * 3).item()))
print(json.dumps({"rank": group.rank(), "sockets": len(fds), "blocking": blocking, "sums": sums}))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wait_ms", ["1", "0"])
def test_a_ring_job_sums_right_with_its_sockets_blocking(tmp_path: Path, wait_ms: str) -> None:
    from tests.e2e.server.test_server_distributed import _ring

    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, MLXD_RING_WAIT_MS=wait_ms, PYTHONPATH=str(ROOT / "src"))
    cmd = [*_ring(2), "--python", sys.executable, str(script)]
    done = subprocess.run(
        cmd, env=env, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=100
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 2, done.stdout + done.stderr
    for line in lines:
        assert line["sockets"] == 2  # one to each neighbour (both rank 1-r on 2 ranks)
        assert line["blocking"] == [wait_ms != "0"] * 2
        assert line["sums"] == [True, True, True]
