"""A coding agent's loop through /v1/messages: time to first token per step, with the prefix
cache and without it (MLXD_PREFIX_CACHE_BYTES=0), side by side in one run; prints JSON.

Two `mlxd serve` processes run the demo model (SmolLM2-135M-Instruct) at once. Each of
--steps steps sends the growing conversation (a ~1.2k-token system prompt, two tools, then
per step the model's answer with a tool call and a ~200-token tool result) to
both servers in alternating order, streaming, greedy, and times the first content delta.
Every round starts from a fresh system prompt, so its first step is a cold prefill on both.
Reported per step: prompt tokens, cache_read_input_tokens and TTFT (median over --rounds) on
each server, and their ratio; then the median and minimum ratio from step 2 on.

    python -m benchmarks.agent_loop_bench                     # 10 steps, 3 rounds, demo model
    python -m benchmarks.agent_loop_bench --steps 10 --rounds 5 --model ./my-checkpoint
    python -m benchmarks.agent_loop_bench --shape claude-code [--mlxd-src OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import PY, agent_rules, emit, free_port, isolated_env, running, tool_result

SERVERS = {"cached": {}, "uncached": {"MLXD_PREFIX_CACHE_BYTES": "0"}}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "run_tests",
        "description": "Run the test suite and report failures.",
        "input_schema": {"type": "object", "properties": {"target": {"type": "string"}}},
    },
]


def system_prompt(session: int) -> str:
    """A long agent system prompt (~1.2k tokens), distinct per round so each round starts cold."""
    head = f"Session {session}. You are a careful coding agent working in a Python repository."
    return f"{head}\n{agent_rules(30)}"


@dataclass
class Turn:
    ttft_s: float
    text: str
    input_tokens: int
    cache_read: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read


def send(client: httpx.Client, url: str, body: dict[str, Any]) -> Turn:
    """One streamed /v1/messages request: TTFT to the first content delta, text and usage."""
    t0 = time.perf_counter()
    ttft: float | None = None
    text: list[str] = []
    usage: dict[str, int] = {}
    with client.stream("POST", url + "/v1/messages", json={**body, "stream": True}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta":
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(event["delta"].get("text", ""))
            elif event["type"] == "message_delta":
                usage = event["usage"]
            elif event["type"] == "error":
                raise RuntimeError(event["error"]["message"])
    end = time.perf_counter() - t0
    return Turn(
        ttft_s=end if ttft is None else ttft,  # nothing shown: the whole request
        text="".join(text),
        input_tokens=usage.get("input_tokens", 0),
        cache_read=usage.get("cache_read_input_tokens", 0),
    )


def agent_round(
    client: httpx.Client, urls: dict[str, str], session: int, args: argparse.Namespace
) -> list[dict[str, Turn]]:
    """One loop of --steps steps; both servers get every step (alternating who goes first)."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "The tests of package_3 fail. Find out why and fix it."}
    ]
    steps: list[dict[str, Turn]] = []
    for n in range(args.steps):
        body = {
            "model": "default",
            "system": system_prompt(session),
            "tools": TOOLS,
            "messages": messages,
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
        }
        order = list(urls) if (n + session) % 2 == 0 else list(urls)[::-1]
        turns = {name: send(client, urls[name], body) for name in order}
        steps.append(turns)
        call = {"type": "tool_use", "id": f"toolu_{session}_{n}", "name": "read_file"}
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": turns["cached"].text or "Let me look."},
                    {**call, "input": {"path": f"src/app/module_{n}.py"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call["id"], "content": tool_result(n, 6)}
                ],
            },
        ]
    return steps


def summarize(rounds: list[list[dict[str, Turn]]]) -> dict[str, Any]:
    per_step = []
    for n in range(len(rounds[0])):
        row: dict[str, Any] = {"step": n + 1, "prompt_tokens": rounds[0][n]["cached"].prompt_tokens}
        for name in SERVERS:
            turns = [r[n][name] for r in rounds]
            row[name] = {
                "ttft_s": round(statistics.median(t.ttft_s for t in turns), 4),
                "cache_read_input_tokens": turns[0].cache_read,
            }
        row["speedup"] = round(row["uncached"]["ttft_s"] / row["cached"]["ttft_s"], 2)
        per_step.append(row)
    later = [row["speedup"] for row in per_step[1:]]
    same = all(r[n]["cached"].text == r[n]["uncached"].text for r in rounds for n in range(len(r)))
    return {
        "steps": per_step,
        "speedup_from_step_2": {
            "median": round(statistics.median(later), 2) if later else None,
            "min": min(later) if later else None,
        },
        "answers_equal": same,  # greedy: the cache must not change what the model says
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", help="a model to serve (default: the demo model)")
    ap.add_argument(
        "--shape",
        choices=("loop", "claude-code"),
        default="loop",
        help="loop: cached vs uncached servers; claude-code: Claude Code sessions "
        "(benchmarks/claude_code_sessions.py)",
    )
    ap.add_argument("--turns", type=int, default=10, help="claude-code: turns, two sessions")
    ap.add_argument("--prompt-tokens", type=int, default=14000, help="claude-code: system+tools")
    ap.add_argument("--mlxd-src", help="claude-code: serve this checkout's mlxd (its src/)")
    args = ap.parse_args()
    if args.shape == "claude-code":
        from benchmarks.claude_code_sessions import run

        result = {"cpu_count": os.cpu_count(), **run(args)}
        result["load_average"] = round(os.getloadavg()[0], 2)
        emit(result, 1)
        return
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as servers:
        urls = {}
        for name, extra in SERVERS.items():  # one after the other: the first imports
            port = free_port()
            cmd = [PY, "-m", "mlxd.cli.main", "serve", "--port", str(port)]
            cmd += ["--model", args.model] if args.model else []
            env = isolated_env(Path(tmp), **extra)
            log = Path(tmp) / f"{name}.log"
            # the first start imports the demo model
            urls[name] = servers.enter_context(
                running(cmd, port, env, ready="/health", seconds=600, log=log)
            )
        with httpx.Client(timeout=600) as client:
            warm = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            for url in urls.values():
                send(client, url, warm)
            rounds = [agent_round(client, urls, s, args) for s in range(args.rounds)]
    result = {
        "model": args.model or "demo (smollm2-135m-instruct)",
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "cpu_count": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
        **summarize(rounds),
    }
    emit(result, 1)


if __name__ == "__main__":
    main()
