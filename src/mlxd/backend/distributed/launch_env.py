"""What `mlx.launch` gives a rank, and what mlxd does with it before serving: the job's group
(joined once, its ring made to wait in the kernel: backend.ring_wait), a stdin pipe the
launcher would spin on, and a launcher whose exit must end the rank too."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from mlxd.backend.distributed.ring_wait import wait_in_kernel

if TYPE_CHECKING:
    import mlx.core as mx


def launched() -> bool:
    """True in a process started by `mlx.launch` (ring/JACCL set MLX_RANK; MPI its own)."""
    return "MLX_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ


def quiet_launcher_stdin() -> None:
    """Stop `mlx.launch` spinning on this rank's stdin: its relay thread `select`s on the pipe
    being writable, which an empty pipe always is, so it loops at full speed (measured: ~20%
    of a core per rank). A server never reads stdin, so fill that pipe through a second write
    end: the relay then sleeps in `select` until the rank prints something."""
    import stat

    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return
        fd = os.open("/proc/self/fd/0", os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no /proc (macOS): the launcher keeps spinning, nothing else changes
        return
    try:
        while os.write(fd, bytes(65536)):
            pass
    except OSError:  # the pipe is full (EAGAIN): what we wanted
        pass
    _held_fds.append(fd)  # kept open for the process's life, so the pipe stays full


_held_fds: list[int] = []


def leave_with_launcher() -> None:
    """Get SIGTERM when the process that started this rank exits (Linux; elsewhere nothing).
    `mlx.launch` has no SIGTERM handler: a service manager stopping it alone would leave its
    local ranks serving. With this, they stop as on `kill -TERM -- -PGID` (rank 0 drains)."""
    import ctypes
    import signal

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the launcher left before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def init_group() -> mx.distributed.Group:
    """The job's group (the first call joins it and makes the ring wait in the kernel)."""
    import mlx.core as mx

    global _joined
    group = mx.distributed.init(strict=True)
    if not _joined:
        _joined = True
        wait_in_kernel()
    return group


_joined = False
