"""Drive a command in a pseudo-terminal, pexpect-style, with the standard library only."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

from tests.signals import default_sigint

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")


class PtySession:
    """A child on a terminal of its own; `expect` waits for text in its (ANSI-stripped) output."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # child: SIGINT at its default (^C must reach it), then exec at once
            try:
                default_sigint()
                os.execve(sys.executable, [sys.executable, *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.raw = ""
        self.cursor = 0  # expect() searches after the previous match
        self.status: int | None = None

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.raw += data.decode("utf-8", "replace")
        return True

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """Wait until `pattern` (a regex) appears after the last match; fail with the output."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            match = regex.search(self.text, self.cursor)
            if match:
                self.cursor = match.end()
                return match
            if time.monotonic() > deadline or not self._read(0.1):
                match = regex.search(self.text, self.cursor)
                if match:
                    self.cursor = match.end()
                    return match
                raise AssertionError(f"{pattern!r} not seen; output:\n{self.text[-3000:]}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def interrupt(self) -> None:
        os.kill(self.pid, signal.SIGINT)

    def alive(self) -> bool:
        return self.status is None and os.waitpid(self.pid, os.WNOHANG) == (0, 0)

    def wait(self, timeout: float = 60) -> int:
        """Read until the child exits; its exit code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._read(0.05)
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            self._read(0.1)
        raise AssertionError(f"child still running; output:\n{self.text[-3000:]}")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)
