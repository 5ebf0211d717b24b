"""Soak: one `mlxd serve` on a tiny checkpoint under mixed traffic for `--minutes`.

`--clients` clients (asyncio) loop until the time is up, each drawing its next request from a
weighted mix: chat completions, Anthropic messages, Responses and text completions, each
streamed and not (chat continues a conversation for a few turns, so the prefix cache serves
and prunes), token counts, streams cancelled after a few chunks, and malformed requests (bad
JSON, wrong types, unknown roles and models, prompts far past the context window). A
well-formed request that fails (non-200, an error frame) and a malformed one answered with
anything but a 4xx are errors. Every `--sample-seconds` the server's /metrics is read: its
resident memory (the RSS curve), the prefix cache's bytes and the running and queued requests.
After the clients stop, the gauges must come back to 0.

    python -m benchmarks.soak --minutes 10 --clients 16

Prints one JSON object: the configuration and machine load, requests and errors per kind
(statuses, latency percentiles), the RSS curve, the gauges at the end, and the first
unexpected errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.common import (
    emit,
    free_port,
    isolated_env,
    mlxd_serve,
    pct,
    progress,
    running,
    scratch,
    sse_lines,
)

WORDS = "the quick brown fox jumps over a lazy dog while weather in paris stays mild".split()
# Gauges of /metrics that read 0 once nothing runs.
IDLE_GAUGES = ("mlxd_running_requests", "mlxd_queue_depth", "mlxd_active_http_requests")


@dataclass
class Outcome:
    ok: bool
    status: int
    detail: str = ""


@dataclass
class Tally:
    requests: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    first_errors: list[str] = field(default_factory=list)

    def add(self, kind: str, outcome: Outcome, seconds: float) -> None:
        self.requests[kind] += 1
        self.statuses[kind][outcome.status] += 1
        self.seconds[kind].append(seconds)
        if not outcome.ok:
            self.errors[kind] += 1
            if len(self.first_errors) < 10:
                self.first_errors.append(f"{kind}: {outcome.status} {outcome.detail[:300]}")


class Client:
    """One simulated user: its own random stream and chat conversation."""

    def __init__(self, http: httpx.AsyncClient, seed: int, window_chars: int) -> None:
        self.http = http
        self.rng = random.Random(seed)
        self.history: list[dict[str, str]] = []
        self.window_chars = window_chars

    def text(self, low: int = 8, high: int = 120) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(low, high)))

    def tokens(self) -> int:
        return self.rng.randint(8, 48)

    # ---- well-formed ------------------------------------------------------------------

    async def chat(self, stream: bool) -> Outcome:
        if len(self.history) >= 10 or not self.history:
            self.history = [{"role": "system", "content": "You answer briefly. " + self.text()}]
        self.history.append({"role": "user", "content": self.text()})
        body = {"messages": self.history, "max_tokens": self.tokens(), "stream": stream}
        outcome, text = await self.post("/v1/chat/completions", body, stream)
        self.history.append({"role": "assistant", "content": text or "ok"})
        return outcome

    async def messages(self, stream: bool) -> Outcome:
        body = {
            "system": "Be brief.",
            "messages": [{"role": "user", "content": self.text()}],
            "max_tokens": self.tokens(),
            "stream": stream,
        }
        return (await self.post("/v1/messages", body, stream))[0]

    async def responses(self, stream: bool) -> Outcome:
        body = {"input": self.text(), "max_output_tokens": self.tokens(), "stream": stream}
        return (await self.post("/v1/responses", body, stream))[0]

    async def completions(self, stream: bool) -> Outcome:
        body = {"prompt": self.text(), "max_tokens": self.tokens(), "stream": stream}
        return (await self.post("/v1/completions", body, stream))[0]

    async def count_tokens(self) -> Outcome:
        body = {"messages": [{"role": "user", "content": self.text()}]}
        return (await self.post("/v1/messages/count_tokens", body, False))[0]

    async def cancel(self) -> Outcome:
        """A long stream closed after a few chunks (the server frees its slot)."""
        body = {"messages": [{"role": "user", "content": self.text()}], "max_tokens": 400,
                "ignore_eos": True, "stream": True}  # fmt: skip
        chunks = 0
        async with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                return Outcome(False, r.status_code, (await r.aread()).decode(errors="replace"))
            async for line in sse_lines(r):
                chunks += line.startswith("data: ")
                if chunks >= self.rng.randint(1, 6):
                    break
        return Outcome(chunks > 0, 200, "" if chunks else "no chunk before the cancel")

    # ---- malformed: any 4xx is right -------------------------------------------------

    async def malformed(self) -> Outcome:
        choice = self.rng.randrange(6)
        path, raw = "/v1/chat/completions", None
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
        if choice == 0:
            raw = b'{"messages": [{"role": "user", "content": "hi"'  # cut short
        elif choice == 1:
            body["max_tokens"] = "ten"
        elif choice == 2:
            body["messages"] = [{"role": "wizard", "content": "hi"}]
        elif choice == 3:
            body["model"] = "no-such-model"
        elif choice == 4:
            path = "/v1/messages"
            body = {"messages": [], "max_tokens": 4}
        else:  # far past the window: refused before it is tokenized
            body["messages"] = [{"role": "user", "content": "word " * (self.window_chars // 5)}]
        content = raw if raw is not None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        r = await self.http.post(path, content=content, headers=headers)
        return Outcome(400 <= r.status_code < 500, r.status_code, r.text)

    # ---- one request ------------------------------------------------------------------

    async def post(self, path: str, body: dict[str, Any], stream: bool) -> tuple[Outcome, str]:
        """(outcome, the text of a chat completion when there is one)."""
        if not stream:
            r = await self.http.post(path, json=body)
            if r.status_code != 200:
                return Outcome(False, r.status_code, r.text), ""
            data = r.json()
            message = (data.get("choices") or [{}])[0].get("message") or {}
            return Outcome(True, 200), str(message.get("content") or "")
        async with self.http.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                return Outcome(False, r.status_code, (await r.aread()).decode(errors="replace")), ""
            async for line in sse_lines(r):
                if line.startswith(("event: error", "event: response.failed")) or (
                    line.startswith('data: {"error"')
                ):
                    return Outcome(False, 200, line), ""
        return Outcome(True, 200), ""


def mix(client: Client) -> dict[str, tuple[float, Callable[[], Awaitable[Outcome]]]]:
    """Request kinds: (weight, what sends one)."""
    return {
        "chat": (14, lambda: client.chat(False)),
        "chat_stream": (14, lambda: client.chat(True)),
        "messages": (8, lambda: client.messages(False)),
        "messages_stream": (8, lambda: client.messages(True)),
        "responses": (8, lambda: client.responses(False)),
        "responses_stream": (8, lambda: client.responses(True)),
        "completions": (6, lambda: client.completions(False)),
        "completions_stream": (6, lambda: client.completions(True)),
        "count_tokens": (4, client.count_tokens),
        "cancel": (10, client.cancel),
        "malformed": (14, client.malformed),
    }


async def client_loop(client: Client, deadline: float, tally: Tally) -> None:
    kinds = mix(client)
    names, weights = list(kinds), [w for w, _ in kinds.values()]
    while time.monotonic() < deadline:
        kind = client.rng.choices(names, weights)[0]
        start = time.perf_counter()
        try:
            outcome = await kinds[kind][1]()
        except httpx.HTTPError as e:
            outcome = Outcome(False, 0, f"{type(e).__name__}: {e}")
        tally.add(kind, outcome, time.perf_counter() - start)


async def sampler(url: str, deadline: float, every: float, curve: list[dict[str, float]]) -> None:
    start = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        while time.monotonic() < deadline:
            gauges = metrics(await http.get("/metrics"))
            curve.append({
                "t_s": round(time.monotonic() - start, 1),
                "rss_mib": round(gauges.get("process_resident_memory_bytes", 0) / 2**20, 1),
                "prefix_cache_mib": round(gauges.get("mlxd_prefix_cache_bytes", 0) / 2**20, 1),
                "running": gauges.get("mlxd_running_requests", 0),
                "queued": gauges.get("mlxd_queue_depth", 0),
            })  # fmt: skip
            progress("sample", curve[-1])
            await asyncio.sleep(every)


def metrics(response: httpx.Response) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text body."""
    out = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


async def settle(url: str, seconds: float = 120.0) -> dict[str, float]:
    """/metrics once the idle gauges read 0 (or after `seconds`)."""
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        while True:
            gauges = metrics(await http.get("/metrics"))
            if all(gauges.get(g, 0) == 0 for g in IDLE_GAUGES) or time.monotonic() > deadline:
                return gauges
            await asyncio.sleep(0.5)


async def soak(url: str, args: argparse.Namespace, window_chars: int) -> dict[str, Any]:
    tally, curve = Tally(), []
    deadline = time.monotonic() + args.minutes * 60
    limits = httpx.Limits(max_connections=args.clients * 2)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        clients = [Client(http, args.seed + i, window_chars) for i in range(args.clients)]
        await asyncio.gather(
            sampler(url, deadline, args.sample_seconds, curve),
            *(client_loop(c, deadline, tally) for c in clients),
        )
    end = await settle(url)
    return report(tally, curve, end)


def report(tally: Tally, curve: list[dict[str, float]], end: dict[str, float]) -> dict[str, Any]:
    kinds = {}
    for kind in sorted(tally.requests):
        seconds = sorted(tally.seconds[kind])
        kinds[kind] = {
            "requests": tally.requests[kind],
            "errors": tally.errors[kind],
            "statuses": {str(s): n for s, n in sorted(tally.statuses[kind].items())},
            "p50_s": round(pct(seconds, 50), 3),
            "p95_s": round(pct(seconds, 95), 3),
        }
    rss = [p["rss_mib"] for p in curve]
    return {
        "requests": sum(tally.requests.values()),
        "errors": sum(tally.errors.values()),
        "cancels": tally.requests["cancel"],
        "by_kind": kinds,
        "rss_mib": {
            "start": rss[0] if rss else 0,
            "max": max(rss, default=0),
            "end": rss[-1] if rss else 0,
        },  # fmt: skip
        "curve": curve,
        "end_gauges": {
            k: v
            for k, v in sorted(end.items())
            if k.startswith(("mlxd_", "process_")) and not k.endswith(("_sum", "_count"))
        },  # fmt: skip
        "idle_at_end": all(end.get(g, 0) == 0 for g in IDLE_GAUGES),
        "first_errors": tally.first_errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--prefix-cache-mib", type=int, default=256,
                        help="the server's prefix cache budget (small enough to fill)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-soak-")
    model = make_checkpoint(work / "tiny-chat", "chat")
    window = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    port = free_port()
    env = isolated_env(work, MLXD_PREFIX_CACHE_BYTES=str(args.prefix_cache_mib << 20))
    cmd = mlxd_serve(model, port, "--max-batch", str(args.clients))
    log = work / "serve.log"
    load_before = os.getloadavg()
    with running(cmd, port, env, log=log) as url:
        result = asyncio.run(soak(url, args, window * 64))
    server_log = log.read_text(errors="replace")
    emit({
        "config": {"minutes": args.minutes, "clients": args.clients, "model": "tiny-chat",
                   "context_window": window, "prefix_cache_mib": args.prefix_cache_mib,
                   "max_batch": args.clients, "seed": args.seed},
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        **result,
        "server_log": {"lines": server_log.count("\n"),
                       "tracebacks": server_log.count("Traceback")},
    })  # fmt: skip


if __name__ == "__main__":
    main()
