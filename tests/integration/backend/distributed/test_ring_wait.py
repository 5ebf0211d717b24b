"""backend.ring_wait: of a rank's ring sockets (found by the hostfile's ports) only the one to
its right neighbour turns blocking with a timeout, nothing else does; off with 0, under
JACCL, without a hostfile or a rank in it. Real sockets on 127.0.0.1; then real ring jobs
(`mlx.launch -n 2|3 --backend ring`): after `init_group` one end of each link blocks, and
all_sums of every size the model uses (a decode row; a prefill chunk over 1 MB, which MLX
runs both ways round the ring, so one socket thread holds a recv and a send at once) still
give the right sums."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlxd.backend.distributed.ring_wait import right_sockets, ring_ports, wait_in_kernel

ROOT = Path(__file__).resolve().parents[4]


@dataclass
class Ring:
    right: int  # rank 0's socket to rank 1's ring port: the one that should block
    others: list[int]  # its accepted socket (on its own port), an unrelated one, ...


@pytest.fixture
def ring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ring]:
    """Rank 0's view of a 2-rank ring on 127.0.0.1, with the hostfile mlx.launch writes, plus
    the far ends of its links (rank 1's, here in the same process) and an unrelated link."""
    own, right = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    unrelated = socket.create_server(("127.0.0.1", 0))
    to_right = socket.create_connection(right.getsockname())
    rights_end, _ = right.accept()
    from_left = socket.create_connection(own.getsockname())
    accepted, _ = own.accept()
    other = socket.create_connection(unrelated.getsockname())
    others_end, _ = unrelated.accept()
    hosts = [[f"127.0.0.1:{own.getsockname()[1]}"], [f"127.0.0.1:{right.getsockname()[1]}"]]
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps(hosts))
    monkeypatch.setenv("MLX_HOSTFILE", str(hostfile))
    monkeypatch.setenv("MLX_RANK", "0")
    monkeypatch.delenv("MLX_JACCL_COORDINATOR", raising=False)
    links = [to_right, rights_end, from_left, accepted, other, others_end]
    for s in links:
        s.setblocking(False)  # as MLX leaves its ring sockets
    yield Ring(to_right.fileno(), [s.fileno() for s in links[1:]])
    for s in [own, right, unrelated, *links]:
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
    assert ring_ports(str(hostfile)) == [{5000, 5001}, {5000}]
    hostfile.write_text("not json")
    assert ring_ports(str(hostfile)) == []
    assert ring_ports(str(tmp_path / "missing.json")) == []


def test_only_the_socket_to_the_right_turns_blocking(ring: Ring) -> None:
    assert right_sockets(ring_ports(os.environ["MLX_HOSTFILE"]), 0) == [ring.right]
    assert wait_in_kernel(0.002) == 1
    assert _blocks(ring.right)
    assert 0.002 <= _recv_timeout(ring.right) <= 0.012  # Linux rounds it up to its clock tick
    assert not any(_blocks(fd) for fd in ring.others)
    # A blocked recv with nothing to read gives up after the timeout, as MLX's loop expects.
    sock = socket.socket(fileno=os.dup(ring.right))
    try:
        with pytest.raises(BlockingIOError):
            sock.recv(1)
    finally:
        sock.close()


@pytest.mark.parametrize("case", ["zero", "jaccl", "no_hostfile", "no_rank"])
def test_nothing_changes_when_off(ring: Ring, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    seconds = 0.0 if case == "zero" else 0.001
    if case == "jaccl":
        monkeypatch.setenv("MLX_JACCL_COORDINATOR", "127.0.0.1:1")
    if case == "no_hostfile":
        monkeypatch.delenv("MLX_HOSTFILE")
    if case == "no_rank":
        monkeypatch.setenv("MLX_RANK", "7")  # not in the hostfile
    assert wait_in_kernel(seconds) == 0
    assert not any(_blocks(fd) for fd in [ring.right, *ring.others])


def test_the_setting_gives_the_default(ring: Ring, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_RING_WAIT_MS", "3")
    assert wait_in_kernel() == 1
    assert 0.003 <= _recv_timeout(ring.right) <= 0.013


JOB = """
import fcntl, json, os, socket
from mlxd.backend.native import prepare_mlx
prepare_mlx()
from mlxd.backend.distributed import launch_env
from mlxd.backend.distributed import ring_wait
import mlx.core as mx
group = launch_env.init_group()
rank, size = group.rank(), group.size()
ports = ring_wait.ring_ports(os.environ["MLX_HOSTFILE"])
links = {}  # every ring socket: "right" (to rank + 1's port) or "left" (accepted on our own)
for fd in ring_wait._open_fds():
    try:
        with ring_wait._borrowed(fd) as s:
            local, peer = s.getsockname()[1], s.getpeername()[1]
    except OSError:
        continue
    side = "left" if local in ports[rank] else "right" if peer in ports[(rank + 1) % size] else ""
    if side:
        links[side] = not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
sums = []
for n in (1, 8 * 64, 300 * 1024):  # a scalar, a decode row, > 1 MB: both ways round the ring
    x = mx.arange(n, dtype=mx.float32) * (rank + 1)
    got = mx.distributed.all_sum(x, group=group)
    want = mx.arange(n, dtype=mx.float32) * (size * (size + 1) // 2)
    sums.append(bool(mx.array_equal(got, want).item()))
print(json.dumps({"rank": rank, "blocking": links, "sums": sums}))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("wait_ms", "ranks"), [("1", 2), ("0", 2), ("1", 3)])
def test_a_ring_job_sums_right_with_one_end_of_each_link_blocking(
    tmp_path: Path, wait_ms: str, ranks: int
) -> None:
    from tests.e2e.server.test_distributed import _ring

    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, MLXD_RING_WAIT_MS=wait_ms, PYTHONPATH=str(ROOT / "src"))
    cmd = [*_ring(ranks), "--python", sys.executable, str(script)]
    done = subprocess.run(
        cmd, env=env, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=100
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == ranks, done.stdout + done.stderr
    for line in lines:
        assert line["blocking"] == {"right": wait_ms != "0", "left": False}
        assert line["sums"] == [True, True, True]
