"""Make MLX's ring backend wait for its peers in the kernel instead of spinning.

MLX 0.32's ring backend gives each of its TCP sockets a thread that, while a transfer is
pending, calls a non-blocking `recv`/`send` in a loop until the bytes move: every rank
waiting in an all_sum burns a core. Tensor parallelism runs 2 all_sums per layer per step,
so on a machine whose cores the ranks share, each rank's spinning thread takes the core the
other rank needs to finish its half of the step (measured, xl, 8 rows, 2 ranks on 2 cores:
~60 ms of spinning per rank per 32 ms step of compute; one 32 KB all_sum 1.7 ms against
0.27 ms with this module).

`wait_in_kernel` turns the sockets a rank receives its all_sums on (MLX's one-way all_sum,
used below 1 MB on 2 ranks, sends left and receives from the right) back to blocking mode
with a short timeout (SO_RCVTIMEO/SO_SNDTIMEO): the same loop then sleeps in `recv` until
bytes arrive, and after the timeout it reports "try again" (EAGAIN, as a non-blocking socket
does) and goes on. Only one end of each link blocks: larger all_sums run both ways round the
ring, so one socket thread holds a recv and a send at once, and with both ends blocking each
would sleep in its recv waiting for the other's send until the timeout (a Linux clock tick,
4 ms here, per exchange); the other end still spins and always sends. MLX's own code and
protocol are unchanged; only the sockets' flags are. See docs/usage/distributed.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import struct
from collections.abc import Iterator

from mlxd.config import setting_float


def ring_ports(hostfile: str) -> list[set[int]]:
    """Each rank's ring ports, from mlx.launch's hostfile (a JSON list per rank of "ip:port"
    strings); empty when the file says nothing of the kind."""
    try:
        with open(hostfile, encoding="utf-8") as f:
            hosts = json.load(f)
        return [{int(str(a).rsplit(":", 1)[1]) for a in host} for host in hosts]
    except (OSError, ValueError, IndexError, TypeError):
        return []


def right_sockets(ports: list[set[int]], rank: int) -> list[int]:
    """This rank's connected TCP sockets to its right neighbour's ring ports (rank + 1: the
    ones it connected, on which it receives its one-way all_sums), not those it accepted."""
    if not 0 <= rank < len(ports):
        return []
    own, right = ports[rank], ports[(rank + 1) % len(ports)]
    found = []
    for fd in _open_fds():
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with _borrowed(fd) as sock:
                if sock.type != socket.SOCK_STREAM or sock.family not in _INET:
                    continue
                local, peer = sock.getsockname()[1], sock.getpeername()[1]
                if peer in right and local not in own:
                    found.append(fd)
    return found


def wait_in_kernel(seconds: float | None = None) -> int:
    """Make this rank's sockets to its right neighbour block up to `seconds` per wait
    (MLXD_RING_WAIT_MS when None); returns how many sockets changed. 0 seconds, or no ring
    (another backend, no hostfile), changes nothing. Call once, after `mx.distributed.init`."""
    if seconds is None:
        seconds = setting_float("ring_wait_ms") / 1000
    hostfile, rank = os.environ.get("MLX_HOSTFILE"), os.environ.get("MLX_RANK", "")
    if seconds <= 0 or not hostfile or not rank.isdigit() or "MLX_JACCL_COORDINATOR" in os.environ:
        return 0
    micros = max(1, round(seconds * 1e6))
    timeout = struct.pack("ll", micros // 1_000_000, micros % 1_000_000)
    changed = 0
    for fd in right_sockets(ring_ports(hostfile), int(rank)):
        with contextlib.suppress(OSError):  # a speed-up only: MLX's loop works either way
            with _borrowed(fd) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeout)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)  # shared with MLX's fd
            changed += 1
    return changed


_INET = (socket.AF_INET, socket.AF_INET6)


def _open_fds() -> list[int]:
    """This process's open descriptors (/dev/fd lists them on Linux and macOS)."""
    try:
        names = os.listdir("/dev/fd")
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


@contextlib.contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket]:
    """A socket object on a duplicate of `fd`: closing it leaves MLX's descriptor open."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        yield sock
    finally:
        sock.close()
