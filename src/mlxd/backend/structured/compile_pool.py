"""CompilePool: grammars validated in child processes that are killed when their budget ends.

llguidance bounds its lexer and parser (ParserLimits), but not all of its JSON-schema
compiler: one 1.4 KB schema (an allOf of 40 patterns) kept a thread busy for minutes, grew
~70 MB/s and aborted the process. A thread cannot be stopped; a process can. So a grammar is
first validated by a worker (compile_worker.py: the same compiler, no tokenizer), with at most
`workers` at once, each capped at `memory` bytes over its baseline, and killed (then replaced
on demand) when it outlives the caller's budget. A grammar that validates compiles in-process
in the same work, so only validated grammars ever reach a thread that cannot be stopped.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from enum import Enum, auto
from multiprocessing.connection import Connection
from pathlib import Path

from mlxd.config import setting_int
from mlxd.errors import EngineFault

__all__ = ["CompilePool", "Outcome", "Verdict", "shared_pool", "stop_shared_pool"]

_WORKER = Path(__file__).with_name("compile_worker.py")
_START_SECONDS = 60.0  # a cold start imports llguidance; not the grammar's budget


class Outcome(Enum):
    VALID = auto()
    INVALID = auto()  # llguidance's error is the message
    TIMEOUT = auto()  # still compiling when the budget ended: killed
    OUT_OF_MEMORY = auto()  # the worker died (its memory cap makes allocation fail)
    BUSY = auto()  # every worker stayed busy for the whole budget
    STOPPED = auto()  # the pool was stopped (the server is shutting down)


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    message: str = ""


@dataclass(eq=False, slots=True)
class _Worker:
    proc: subprocess.Popen[bytes]
    send: Connection
    recv: Connection

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.send.close()
        self.recv.close()


class CompilePool:
    """At most `workers` validating child processes, started on demand and kept while idle."""

    def __init__(self, workers: int, memory: int) -> None:
        self.workers = max(1, workers)
        self.memory = memory
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._starting = 0  # slots taken by workers not started yet
        self._stopped = False
        self._cond = threading.Condition()
        atexit.register(self.stop)

    @property
    def live(self) -> int:
        """Worker processes alive or starting."""
        with self._cond:
            return len(self._idle) + self.busy

    @property
    def busy(self) -> int:
        """Workers compiling (or starting to)."""
        return len(self._busy) + self._starting

    def validate(self, grammar: str, seconds: float) -> Verdict:
        """llguidance's verdict on `grammar` within `seconds` of work; waiting for a free
        worker has its own `seconds` (BUSY when none frees up by then)."""
        worker = self._checkout(time.monotonic() + seconds)
        if worker is None:
            return Verdict(Outcome.STOPPED if self._stopped else Outcome.BUSY)
        verdict: Verdict | None = None
        try:
            worker.send.send_bytes(grammar.encode())
            if worker.recv.poll(seconds):
                message = worker.recv.recv_bytes().decode()
                verdict = Verdict(Outcome.INVALID, message) if message else Verdict(Outcome.VALID)
                return verdict
            return Verdict(Outcome.TIMEOUT)
        except (EOFError, OSError):
            return Verdict(Outcome.STOPPED if self._stopped else Outcome.OUT_OF_MEMORY)
        finally:
            self._checkin(worker, healthy=verdict is not None)

    def stop(self) -> None:
        """Kill every worker, busy ones included; later validations answer STOPPED at once."""
        with self._cond:
            self._stopped = True
            idle, busy = list(self._idle), list(self._busy)
            self._idle.clear()
            self._cond.notify_all()
        for worker in idle:
            worker.close()
        for worker in busy:
            worker.proc.kill()  # its validating thread sees EOF and closes it

    def _checkout(self, deadline: float) -> _Worker | None:
        with self._cond:
            while not self._stopped and not self._idle and self._full():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if self._stopped:
                return None
            if self._idle:
                worker = self._idle.pop()
                self._busy.add(worker)
                return worker
            self._starting += 1
        try:
            worker = self._start()
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:  # one step from starting to busy: the count never dips
            self._starting -= 1
            if not self._stopped:
                self._busy.add(worker)
                return worker
        worker.close()  # stopped while it started
        return None

    def _full(self) -> bool:
        return len(self._idle) + self.busy >= self.workers

    def _checkin(self, worker: _Worker, *, healthy: bool) -> None:
        with self._cond:
            self._busy.discard(worker)
            keep = healthy and not self._stopped
            if keep:
                self._idle.append(worker)
            self._cond.notify()
        if not keep:
            worker.close()

    def _start(self) -> _Worker:
        child_in, parent_out = os.pipe()  # (read end, write end) of each direction
        parent_in, child_out = os.pipe()
        worker: _Worker | None = None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", str(_WORKER), str(child_in), str(child_out)]
                + [str(self.memory)],
                pass_fds=(child_in, child_out),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # an allocation failure's abort message
            )
            worker = _Worker(proc, Connection(parent_out, readable=False), Connection(parent_in))
        finally:
            os.close(child_in)
            os.close(child_out)
            if worker is None:
                os.close(parent_out)
                os.close(parent_in)
        try:
            ready = worker.recv.poll(_START_SECONDS) and worker.recv.recv_bytes() == b"ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            worker.close()
            raise EngineFault("the grammar compiler process did not start")
        return worker


_SHARED: CompilePool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> CompilePool:
    """The process's pool, sized by MLXD_GRAMMAR_WORKERS and MLXD_GRAMMAR_MEMORY_BYTES."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            workers = setting_int("grammar_workers")
            _SHARED = CompilePool(workers, setting_int("grammar_memory_bytes"))
        return _SHARED


def stop_shared_pool() -> None:
    """Shutting down: stop the process's pool, if it ever started, and every compile in it."""
    with _SHARED_LOCK:
        pool = _SHARED
    if pool is not None:
        pool.stop()
