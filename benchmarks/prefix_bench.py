"""Prefix reuse across turns on sliding-window and hybrid recurrent models: time to first token
per turn of a 10-turn chat and a 10-step agent loop, for mlxd with its prefix cache, mlxd
without it (MLXD_PREFIX_CACHE_BYTES=0), `mlx_lm.server` and `vllm-mlx`, side by side; JSON.

Checkpoints are generated (tests/checkpoints.py, random weights, --size medium by default):
gemma3_text with sliding-window layers (rotating caches, window 16) and a global layer, and
lfm2 (short convolutions: a recurrent state, and attention layers). Each server runs alone
(one after the other, the same requests). Every turn streams /v1/chat/completions, greedy,
EOS suppressed by logit_bias (each answer has --max-tokens tokens), and the client sends back
exactly the content it received. The chat: a ~300-token system prompt, a new user message per
turn. The agent loop: a ~1k-token system prompt and two tools, then per step an assistant tool
call and a ~200-token tool result. Each round starts from a fresh system prompt (a cold first
turn); per turn the median TTFT over --rounds is reported, with the prompt and cached tokens
the server reported, and from turn 2 on: mlxd cache off / on, and best peer / mlxd.

    python -m benchmarks.prefix_bench                                  # mlxd on and off only
    python -m benchmarks.prefix_bench --servers mlxd,mlxd-nocache,mlx_lm,vllm-mlx \
        --mlx-lm-python /work/peers/mlxlm/bin/python --vllm-mlx /work/peers/vllmmlx/bin/vllm-mlx
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import agent_rules, emit, free_port, running, tool_result
from benchmarks.server_bench import server_command, server_env

KINDS = ("sliding", "hybrid")
SERVERS = ("mlxd", "mlxd-nocache", "mlx_lm", "vllm-mlx")
PEERS = ("mlx_lm", "vllm-mlx")
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the tests.",
     "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}},
]  # fmt: skip


@dataclass
class Turn:
    ttft_s: float
    content: str
    prompt_tokens: int
    cached_tokens: int | None


def chat_system(session: int) -> str:
    facts = " ".join(
        f"Fact {i}: the quick brown fox {i} jumps over the lazy dog." for i in range(20)
    )
    return f"Session {session}. You are a helpful assistant. {facts}"


def agent_system(session: int) -> str:
    head = f"Session {session}. You are a careful coding agent working in a repository."
    return f"{head}\n{agent_rules(10)}"


def send(client: httpx.Client, url: str, body: dict[str, Any]) -> Turn:
    """One streamed chat completion: TTFT to the first visible delta, content, usage."""
    t0 = time.perf_counter()
    ttft: float | None = None
    content: list[str] = []
    usage: dict[str, Any] = {}
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.read().decode(errors='replace')}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            usage = data.get("usage") or usage
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                visible = [delta.get(k) for k in ("content", "reasoning_content", "reasoning")]
                if any(visible) or delta.get("tool_calls"):
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
                content.append(delta.get("content") or "")
    details = usage.get("prompt_tokens_details") or {}
    return Turn(
        ttft_s=ttft if ttft is not None else time.perf_counter() - t0,
        content="".join(content),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=details.get("cached_tokens"),
    )


def chat(client: httpx.Client, url: str, session: int, args: argparse.Namespace) -> list[Turn]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": chat_system(session)}]
    turns = []
    for n in range(args.turns):
        question = " ".join(f"Question {n}.{i}: what is {i} plus {n}?" for i in range(3))
        messages.append({"role": "user", "content": question})
        turn = send(client, url, {**args.body, "messages": messages})
        messages.append({"role": "assistant", "content": turn.content})
        turns.append(turn)
    return turns


def agent(client: httpx.Client, url: str, session: int, args: argparse.Namespace) -> list[Turn]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": agent_system(session)},
        {"role": "user", "content": "The tests of package_3 fail. Find out why and fix it."},
    ]
    turns = []
    for n in range(args.turns):
        turn = send(client, url, {**args.body, "messages": messages, "tools": TOOLS})
        arguments = json.dumps({"path": f"src/app/module_{n}.py"})
        function = {"name": "read_file", "arguments": arguments}
        call = {"id": f"call_{session}_{n}", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": turn.content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": tool_result(n, 4)},
        ]
        turns.append(turn)
    return turns


WORKLOADS: dict[str, Callable[[httpx.Client, str, int, argparse.Namespace], list[Turn]]] = {
    "chat": chat,
    "agent": agent,
}


def command_env(
    server: str, model: Path, port: int, args: argparse.Namespace
) -> tuple[list[str], dict[str, str]]:
    """`server`'s command and environment (mlxd-nocache: mlxd with no prefix cache)."""
    kind = "mlxd" if server.startswith("mlxd") else server
    cmd = server_command(kind, model, port, args)
    env = dict(os.environ, MLXD_HOME=str(args.home), HF_HUB_OFFLINE="1")
    if server == "mlxd-nocache":
        env["MLXD_PREFIX_CACHE_BYTES"] = "0"
    return cmd, server_env(kind, env, args, Path(cmd[0]).parent.as_posix() + "/python")


def run_server(server: str, model: Path, args: argparse.Namespace) -> dict[str, list[list[Turn]]]:
    """Every workload, --rounds times (fresh sessions), on one server: workload -> rounds."""
    port = free_port()
    cmd, env = command_env(server, model, port, args)
    # mlxd serves its --model as "default"; the peers know the model by its directory.
    args.body["model"] = "default" if server.startswith("mlxd") else str(model)
    with running(cmd, port, env) as url, httpx.Client(timeout=900) as client:
        warm = {**args.body, "messages": [{"role": "user", "content": "Warm up."}]}
        send(client, url, warm)
        return {
            name: [run(client, url, 1000 * r + i, args) for r in range(args.rounds)]
            for i, (name, run) in enumerate(WORKLOADS.items())
        }


def summarize(results: dict[str, dict[str, list[list[Turn]]]], workload: str) -> dict[str, Any]:
    servers = list(results)
    rows = []
    for n in range(len(results[servers[0]][workload][0])):
        row: dict[str, Any] = {"turn": n + 1}
        for server in servers:
            turns = [rounds[n] for rounds in results[server][workload]]
            row[server] = {
                "ttft_s": round(statistics.median(t.ttft_s for t in turns), 4),
                "prompt_tokens": turns[0].prompt_tokens,
                "cached_tokens": turns[0].cached_tokens,
            }
        rows.append(row)
    summary: dict[str, Any] = {"turns": rows}
    later = rows[1:]
    if "mlxd" in servers and "mlxd-nocache" in servers:
        ratios = [r["mlxd-nocache"]["ttft_s"] / r["mlxd"]["ttft_s"] for r in later]
        summary["cache_off_over_on_from_turn_2"] = _spread(ratios)
    peers = [s for s in servers if s in PEERS]
    if "mlxd" in servers and peers:
        ratios = [min(r[p]["ttft_s"] for p in peers) / r["mlxd"]["ttft_s"] for r in later]
        summary["best_peer_over_mlxd_from_turn_2"] = _spread(ratios)  # > 1: mlxd faster
    return summary


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="mlxd,mlxd-nocache")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--size", default="medium", help="tests/checkpoints.py SIZES key")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--mlx-lm-python", help="python of a venv with mlx-lm (default: this one)")
    ap.add_argument("--vllm-mlx", default="vllm-mlx", help="the vllm-mlx executable")
    ap.add_argument("--rapid-mlx", default="rapid-mlx")
    ap.add_argument("--blas", choices=("mkl", "ships", "reference"), default="ships")
    args = ap.parse_args()
    from tests.checkpoints import make_checkpoint

    servers = args.servers.split(",")
    out: dict[str, Any] = {
        "size": args.size,
        "turns": args.turns,
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "servers": servers,
        "cpu_count": os.cpu_count(),
        "kinds": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        args.home = Path(tmp) / "home"
        for kind in args.kinds.split(","):
            model = make_checkpoint(Path(tmp) / kind, kind, size=args.size)
            config = json.loads((model / "config.json").read_text())
            config["max_position_embeddings"] = 16384  # the agent loop grows past 2048
            (model / "config.json").write_text(json.dumps(config))
            eos = config["eos_token_id"]
            args.body = {
                "max_tokens": args.max_tokens,
                "temperature": 0.0,
                "logit_bias": {str(eos): -100},
            }
            results = {server: run_server(server, model, args) for server in servers}
            out["kinds"][kind] = {w: summarize(results, w) for w in WORKLOADS}
            out["load_average"] = round(os.getloadavg()[0], 2)
            print(json.dumps(out["kinds"][kind], indent=1), file=sys.stderr)
    emit(out, 1)


if __name__ == "__main__":
    main()
