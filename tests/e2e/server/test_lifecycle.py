"""Concurrency, disconnects, /health under load, auth, drain on SIGTERM, start-up failures."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import httpx
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env, wait_for

USER = [{"role": "user", "content": "Tell me a story."}]
# Seconds of decoding: 'tiny-long' has a 64k window (see conftest); tests cancel it early.
LONG = {"model": "tiny-long", "messages": USER, "max_tokens": 30000, "ignore_eos": True}


def metrics(http: httpx.Client) -> str:
    return http.get("/../metrics").text


def stream_until_first_content(http: httpx.Client, body: dict) -> tuple[object, object]:
    """Open a streaming request and read until the first content delta; returns (cm, lines)."""
    cm = http.stream("POST", "/chat/completions", json={**body, "stream": True})
    response = cm.__enter__()
    assert response.status_code == 200
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("data: ") and '"content":"' in line and '"role"' not in line:
            break
    return cm, lines


def test_concurrent_greedy_streams_match_each_alone(client: openai.OpenAI) -> None:
    """Eight greedy streams at once (batched) give what each gives alone. How much faster the
    batch is: benchmarks/concurrency_bench.py."""

    def one(i: int) -> tuple[str, int]:
        stream = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": f"Tell me story number {i}."}],
            max_tokens=48,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage.completion_tokens  # type: ignore[union-attr]

    alone = [one(i) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(one, range(8)))
    assert together == alone
    assert [n for _, n in alone] == [48] * 8
    assert len({text for text, _ in alone}) > 1  # distinct prompts, distinct answers


def test_concurrent_streams_decode_together(server: ServerProcess, http: httpx.Client) -> None:
    """Eight long streams opened at once all stream before any ends: the engine decodes them
    in one batch rather than one after another."""
    opened = [stream_until_first_content(http, {**LONG, "max_tokens": 20000}) for _ in range(8)]
    try:
        assert metric(metrics(http), "mlxd_running_requests") == 8
    finally:
        for cm, _ in opened:
            cm.__exit__(None, None, None)  # type: ignore[attr-defined]
    wait_for(lambda: metric(metrics(http), "mlxd_running_requests") == 0, "running == 0")


def test_disconnect_mid_stream_cancels(http: httpx.Client) -> None:
    before = metric(metrics(http), 'mlxd_requests_finished_total{reason="cancelled"}')
    cm, lines = stream_until_first_content(http, LONG)
    assert metric(metrics(http), "mlxd_running_requests") >= 1
    cm.__exit__(None, None, None)  # type: ignore[attr-defined]  # closes the connection
    wait_for(lambda: metric(metrics(http), "mlxd_running_requests") == 0, "running == 0")
    after = metric(metrics(http), 'mlxd_requests_finished_total{reason="cancelled"}')
    assert after == before + 1
    assert metric(metrics(http), "mlxd_active_http_requests") == 0


def test_metrics_count_what_clients_saw(http: httpx.Client) -> None:
    """A tool call finishes as `tool_calls` (not `stop`); a stream its client left counts as
    `cancelled`, with the tokens it generated before that."""
    reason = 'mlxd_requests_finished_total{{reason="{}"}}'.format
    before = metrics(http)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    body = {"model": "scripted", "messages": USER, "tools": tools, "max_tokens": 64}
    answer = http.post("/chat/completions", json=body).json()
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    after = metrics(http)
    assert metric(after, reason("tool_calls")) == metric(before, reason("tool_calls")) + 1
    assert metric(after, reason("stop")) == metric(before, reason("stop"))
    cm, lines = stream_until_first_content(http, LONG)
    more = [line for _, line in zip(range(20), cast(Iterator[str], lines), strict=False)]
    seen = 1 + sum('"content":"' in line for line in more)  # content deltas received
    cm.__exit__(None, None, None)  # type: ignore[attr-defined]
    wait_for(lambda: metric(metrics(http), "mlxd_running_requests") == 0, "running == 0")
    left = metrics(http)
    assert metric(left, reason("cancelled")) == metric(after, reason("cancelled")) + 1
    generated = metric(left, "mlxd_generation_tokens_total") - metric(
        after, "mlxd_generation_tokens_total"
    )
    assert generated >= seen


def test_disconnect_mid_non_stream_cancels(server: ServerProcess, http: httpx.Client) -> None:
    before = metric(metrics(http), 'mlxd_requests_finished_total{reason="cancelled"}')
    started = threading.Event()

    def watch() -> None:
        wait_for(lambda: metric(metrics(http), "mlxd_running_requests") >= 1, "running")
        started.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    with httpx.Client(base_url=server.base_url) as own, pytest.raises(httpx.ReadTimeout):
        # The read timeout fires while the answer is being generated; httpx then drops the
        # connection, which is the disconnect.
        own.post("/chat/completions", json=LONG, timeout=httpx.Timeout(60, read=1.0))
    watcher.join()
    assert started.is_set()
    wait_for(lambda: metric(metrics(http), "mlxd_running_requests") == 0, "running == 0")
    after = metric(metrics(http), 'mlxd_requests_finished_total{reason="cancelled"}')
    assert after == before + 1


def test_health_answers_during_long_generation(server: ServerProcess, http: httpx.Client) -> None:
    cm, lines = stream_until_first_content(http, LONG)  # keep `lines`: dropping it disconnects
    try:
        for _ in range(5):
            r = httpx.get(server.url + "/health", timeout=10)
            assert r.status_code == 200 and r.json()["status"] == "ok"
        assert metric(metrics(http), "mlxd_running_requests") >= 1  # still generating
    finally:
        cm.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_metrics_exposition(http: httpx.Client) -> None:
    http.post("/chat/completions", json={"messages": USER, "max_tokens": 3})
    text = metrics(http)
    for name in (
        "mlxd_prompt_tokens_total",
        "mlxd_generation_tokens_total",
        "mlxd_queue_depth",
        "mlxd_time_to_first_token_seconds_count",
        "mlxd_inter_token_latency_seconds_count",
        "mlxd_prefix_cache_hits_total",
        "mlxd_prefix_cache_misses_total",
        "mlxd_prefix_cache_evictions_total",
        "mlxd_prefix_cache_bytes",
        "mlxd_prefix_cache_entries",
    ):
        assert f"\n{name} " in text, name
    assert 'mlxd_http_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert metric(text, "mlxd_generation_tokens_total") > 0
    assert metric(text, 'mlxd_time_to_first_token_seconds_bucket{le="+Inf"}') > 0


# ---- servers of their own ------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_server(tiny_chat_model: Path, server_home: Path):  # type: ignore[no-untyped-def]
    srv = launch(
        [
            "--model",
            str(tiny_chat_model),
            "--api-key",
            "s3cret",
            "--drain-seconds",
            "1",
            "--max-batch",
            "1",
            "--max-queue",
            "1",
            "--allowed-origins",
            "http://ui.example",
        ],
        server_env(server_home),
    )
    yield srv
    if srv.proc.poll() is None:
        srv.proc.kill()


def test_api_key_required_except_health(keyed_server: ServerProcess) -> None:
    url = keyed_server.base_url
    wrong = openai.OpenAI(base_url=url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="default", messages=USER, max_tokens=2)
    r = httpx.post(url + "/chat/completions", json={"messages": USER})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(keyed_server.url + "/metrics").status_code == 401
    assert httpx.get(keyed_server.url + "/health").status_code == 200
    right = openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0)
    r2 = right.chat.completions.create(model="default", messages=USER, max_tokens=2)
    assert r2.usage is not None and r2.usage.completion_tokens >= 1


def test_cors_only_for_allowed_origins(keyed_server: ServerProcess) -> None:
    url = keyed_server.base_url + "/chat/completions"
    pre = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    ok = httpx.options(url, headers={"Origin": "http://ui.example", **pre})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "http://ui.example"
    bad = httpx.options(url, headers={"Origin": "http://evil.example", **pre})
    assert "access-control-allow-origin" not in bad.headers


def test_burst_of_new_connections_all_served(server: ServerProcess) -> None:
    """64 clients connect at once (each its own connection): no resets, every one answered."""
    host, port = server.url.removeprefix("http://").split(":")
    barrier = threading.Barrier(64)

    def one(_: int) -> bytes:
        barrier.wait()
        with socket.create_connection((host, int(port)), timeout=60) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            return s.makefile("rb").readline()

    with ThreadPoolExecutor(64) as pool:
        status_lines = list(pool.map(one, range(64)))
    assert all(line.startswith(b"HTTP/1.1 200") for line in status_lines), status_lines


def test_queue_full_is_429_with_retry_after(keyed_server: ServerProcess) -> None:
    auth = {"Authorization": "Bearer s3cret"}
    with httpx.Client(base_url=keyed_server.base_url, headers=auth, timeout=60) as http:
        cm1, lines1 = stream_until_first_content(http, LONG)  # the one batch slot
        cm2 = http.stream("POST", "/chat/completions", json={**LONG, "stream": True})
        r2 = cm2.__enter__()  # the one queue place (its role chunk comes at once)
        try:
            r = http.post("/chat/completions", json={"messages": USER, "max_tokens": 2})
            assert r.status_code == 429
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "queue_full"
        finally:
            r2.close()
            cm2.__exit__(None, None, None)
            cm1.__exit__(None, None, None)  # type: ignore[attr-defined]
        wait_for(
            lambda: (
                metric(http.get("/../metrics").text, "mlxd_running_requests") == 0
                and metric(http.get("/../metrics").text, "mlxd_queue_depth") == 0
            ),
            "idle",
        )


def test_sigterm_drains_then_exits_zero(keyed_server: ServerProcess) -> None:
    auth = {"Authorization": "Bearer s3cret"}
    with httpx.Client(base_url=keyed_server.base_url, headers=auth, timeout=60) as http:
        cm, lines = stream_until_first_content(http, LONG)
        keyed_server.proc.send_signal(signal.SIGTERM)

        def refused() -> bool:  # new requests: 503 while draining (or the socket is gone)
            try:
                r = httpx.post(
                    keyed_server.base_url + "/chat/completions",
                    headers=auth,
                    json={"messages": USER, "max_tokens": 2},
                )
            except httpx.TransportError:
                return True
            return r.status_code == 503 and r.json()["error"]["code"] == "unavailable"

        wait_for(refused, "503 while draining")
        rest = list(lines)  # type: ignore[call-overload]
        cm.__exit__(None, None, None)  # type: ignore[attr-defined]
    events = [line[6:] for line in rest if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "unavailable"  # stopped by the drain
    assert keyed_server.proc.wait(timeout=60) == 0


def test_second_ctrl_c_exits_at_once(tiny_chat_model: Path, server_home: Path) -> None:
    srv = launch(
        ["--model", str(tiny_chat_model), "--drain-seconds", "600"], server_env(server_home)
    )
    try:
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            cm, lines = stream_until_first_content(http, LONG)
            srv.proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
            assert srv.proc.poll() is None  # still draining: the stream has 600 s
            srv.proc.send_signal(signal.SIGINT)
            srv.proc.wait(timeout=60)  # far less than the 600 s drain
            cm.__exit__(None, None, None)  # type: ignore[attr-defined]
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()


def _run_serve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mlxd.cli.main", "serve", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_port_in_use_is_one_line_and_non_loopback_warns(
    tiny_chat_model: Path, server_home: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _run_serve(
            ["--model", str(tiny_chat_model), "--host", "0.0.0.0", "--port", str(port)],
            server_env(server_home),
        )
    assert r.returncode != 0
    assert "WARNING" in r.stderr and "API key" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("mlxd: error:") and "in use" in last
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("broken", ["missing", "no-config"])
def test_model_that_cannot_load_exits_before_listening(
    broken: str, tmp_path: Path, server_home: Path
) -> None:
    model = tmp_path / "model"
    if broken == "no-config":
        model.mkdir()
        (model / "model.safetensors").write_bytes(b"not really")
    r = _run_serve(["--model", str(model), "--port", "0", "--json"], server_env(server_home))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert json.loads(lines[0])["error"]["message"]
    assert "mlxd serve:" not in r.stderr  # never announced itself as listening
