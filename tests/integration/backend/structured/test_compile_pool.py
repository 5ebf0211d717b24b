"""CompilePool: grammars validated in child processes that end with their budget (time,
memory), a bounded number at once, and never outlive the process that started them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import llguidance
import pytest

from mlxd.backend.structured.compile_pool import CompilePool, Outcome
from tests.e2e.server.serverproc import wait_for
from tests.hostile import SLOW_SCHEMA


def lark(schema: object) -> str:
    return llguidance.LLMatcher.grammar_from_lark(f"start: %json {json.dumps(schema)}\n")


SLOW = lark(SLOW_SCHEMA)
FINE = lark({"enum": ["yes", "no"]})


@pytest.fixture
def pool() -> Iterator[CompilePool]:
    p = CompilePool(workers=1, memory=1 << 30)
    yield p
    p.stop()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def children(pid: int) -> set[int]:
    """Live child processes of `pid` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(") ")[-1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_a_compile_past_its_budget_is_killed_and_the_next_gets_a_new_worker(pool):
    assert pool.validate(FINE, 30).outcome is Outcome.VALID
    (worker,) = children(os.getpid()) & {w.proc.pid for w in pool._idle}
    assert pool.validate(SLOW, 0.3).outcome is Outcome.TIMEOUT
    assert not alive(worker) and pool.live == 0
    assert pool.validate(FINE, 30).outcome is Outcome.VALID


def test_errors_come_back_as_llguidance_words(pool):
    verdict = pool.validate(lark({"type": "strin"}), 30)
    assert verdict.outcome is Outcome.INVALID and "strin" in verdict.message


def test_a_compile_past_its_memory_dies_alone():
    pool = CompilePool(workers=1, memory=64 << 20)
    try:
        assert pool.validate(SLOW, 120).outcome is Outcome.OUT_OF_MEMORY
        assert pool.validate(FINE, 30).outcome is Outcome.VALID
    finally:
        pool.stop()


def test_a_full_pool_answers_busy_within_the_budget(pool):
    slow = threading.Thread(target=pool.validate, args=(SLOW, 1.5))
    slow.start()
    wait_for(lambda: pool.busy == 1, "the slow compile to start")
    assert pool.validate(FINE, 0.2).outcome is Outcome.BUSY
    slow.join()
    assert pool.validate(FINE, 30).outcome is Outcome.VALID


PARENT = """
import sys, threading
from mlxd.backend.structured.compile_pool import CompilePool
pool = CompilePool(workers=1, memory=1 << 30)
threading.Thread(target=pool.validate, args=(sys.argv[1], 600), daemon=True).start()
sys.stdin.readline()
"""


def test_a_worker_ends_when_its_parent_dies():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, SLOW], stdin=subprocess.PIPE)
    try:
        wait_for(lambda: bool(children(parent.pid)), "the parent to start its worker")
        (worker,) = children(parent.pid)
        parent.kill()  # no atexit, no cleanup: the worker notices on its own
        parent.wait()
        wait_for(lambda: not alive(worker), "the orphaned worker to exit")
    finally:
        parent.kill()


def test_stop_ends_running_compiles_at_once_and_refuses_later_ones(pool):
    verdicts: list[Outcome] = []
    slow = threading.Thread(target=lambda: verdicts.append(pool.validate(SLOW, 600).outcome))
    slow.start()
    wait_for(lambda: bool(pool._busy), "the slow compile to start")
    (worker,) = children(os.getpid()) & {w.proc.pid for w in pool._busy}
    pool.stop()
    slow.join(timeout=60)
    assert verdicts == [Outcome.STOPPED] and not alive(worker)
    assert pool.validate(FINE, 30).outcome is Outcome.STOPPED and pool.live == 0
