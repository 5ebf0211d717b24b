"""Grammar budgets through the real `mlxd serve` (memory-capped): a schema that takes
llguidance minutes to compile is refused with a 400 on all three chat APIs once
MLXD_GRAMMAR_SECONDS end, its compile stops (the server's CPU time stops growing), other
schemas and plain requests are served, and SIGTERM stops the server mid-compile; schemas with
no finite instance get a 400 before queueing."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env, wait_for
from tests.hostile import SLOW_SCHEMA, memory_capped

FINE = {"enum": ["fine"]}
SELF = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
WINDOW_SECONDS = 2.0


def body(api: str, schema: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """(path, body) of a request on `api` whose answer follows `schema` (None: free)."""
    if api == "chat":
        b: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        if schema is not None:
            spec = {"name": "a", "schema": schema}
            b["response_format"] = {"type": "json_schema", "json_schema": spec}
        return "/v1/chat/completions", b
    if api == "messages":
        b = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        if schema is not None:
            b["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return "/v1/messages", b
    b = {"input": "hi", "max_output_tokens": 16}
    if schema is not None:
        b["text"] = {"format": {"type": "json_schema", "name": "a", "schema": schema}}
    return "/v1/responses", b


def post(server: ServerProcess, api: str, schema: dict[str, Any] | None) -> httpx.Response:
    path, b = body(api, schema)
    return httpx.post(server.url + path, json={"model": "default", **b}, timeout=120)


def error_of(api: str, r: httpx.Response) -> tuple[str, str]:
    """(error type, message) in the API's own error shape."""
    data = r.json()
    if api == "messages":
        assert data["type"] == "error"
    return data["error"]["type"], data["error"]["message"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process's own threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def start(tiny_chat_model: Path, home: Path, seconds: str) -> ServerProcess:
    env = server_env(home, MLXD_GRAMMAR_SECONDS=seconds)
    return launch(["--model", str(tiny_chat_model)], env, preexec_fn=memory_capped())


@pytest.fixture(scope="module")
def budget_server(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    srv = start(tiny_chat_model, tmp_path_factory.mktemp("grammar-home"), "0.5")
    yield srv
    srv.stop()


APIS = ["chat", "messages", "responses"]


@pytest.mark.parametrize("api", APIS)
def test_a_slow_schema_is_400_and_its_compile_stops(budget_server: ServerProcess, api: str):
    r = post(budget_server, api, SLOW_SCHEMA)
    assert r.status_code == 400, r.text
    kind, message = error_of(api, r)
    assert kind == "invalid_request_error" and "MLXD_GRAMMAR_SECONDS" in message
    fine = post(budget_server, api, FINE)
    assert fine.status_code == 200, fine.text
    assert post(budget_server, api, None).status_code == 200
    pid = budget_server.proc.pid
    cpu, rss = cpu_seconds(pid), rss_bytes(pid)
    threading.Event().wait(WINDOW_SECONDS)
    # Idle, the server spends no CPU and keeps its memory; a compile left running spent
    # 0.4-1 CPU s/s (the machine's load decides) and grew 40-70 MB/s.
    assert cpu_seconds(pid) - cpu < WINDOW_SECONDS / 8
    assert rss_bytes(pid) - rss < 16 << 20
    assert budget_server.proc.poll() is None


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("schema", [{"$ref": "#"}, SELF], ids=["self", "required-self"])
def test_a_schema_with_no_finite_instance_is_400(
    budget_server: ServerProcess, api: str, schema: dict[str, Any]
):
    r = post(budget_server, api, schema)
    assert r.status_code == 400, r.text
    kind, message = error_of(api, r)
    assert kind == "invalid_request_error" and "no finite JSON value" in message


def test_sigterm_stops_the_server_while_slow_schemas_compile(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
):
    srv = start(tiny_chat_model, tmp_path_factory.mktemp("sigterm-home"), "600")
    answers: list[int] = []

    def slow() -> None:
        try:
            answers.append(post(srv, "chat", SLOW_SCHEMA).status_code)
        except httpx.TransportError:
            answers.append(0)

    clients = [threading.Thread(target=slow) for _ in range(3)]
    try:
        cpu = cpu_seconds(srv.proc.pid)
        for c in clients:
            c.start()
        # Two compiles run (in their workers; or, in-process, once they spend CPU) and one waits.
        wait_for(
            lambda: len(children(srv.proc.pid)) == 2 or cpu_seconds(srv.proc.pid) > cpu + 2,
            "two compiles to start",
        )
        workers = children(srv.proc.pid)
        srv.proc.terminate()
        srv.proc.wait(timeout=30)  # the old pool ran on for minutes, deaf to SIGTERM
        wait_for(lambda: not any(map(alive, workers)), "the workers to end")
    finally:
        srv.proc.kill()
        for c in clients:
            c.join(timeout=60)
    assert srv.proc.returncode == 0
    assert answers and all(status in (0, 503) for status in answers)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
