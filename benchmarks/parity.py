"""CLI/server parity: each prompt goes through `mlxd run --json` and through a real
`mlxd serve` process (/v1/chat/completions), greedy; any difference in content, reasoning,
tool calls or finish reason is a mismatch. Prints one JSON object.

    python -m benchmarks.parity [--model REF] [--prompts FILE] [--max-tokens 32]

REF is anything `mlxd run` accepts (a directory, a store name such as
smollm2-135m-instruct); without it a tiny random checkpoint is built in a temp dir.
FILE holds one prompt per line. MLXD_HOME/HF_HOME are taken from the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import PY, emit, free_port, mlxd_serve, running

MLXD = [PY, "-m", "mlxd.cli.main"]
PROMPTS = [
    "What is the capital of France?",
    "Hello, how are you today?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Translate 'good morning' into French.",
    'Return JSON: {"name": "get_weather", "arguments": {"city": "Paris"}}',
    "café naïve résumé 日本語 😀",
    "def add(a, b):",
]


def cli_answer(model: str, prompt: str, max_tokens: int, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [*MLXD, "run", "-m", model, "--json", "--temperature", "0",
         "--max-tokens", str(max_tokens), "--", prompt],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()}
    body = json.loads(done.stdout)
    return {
        "content": body["content"],
        "reasoning": body["reasoning"] or None,
        "tool_calls": [(c["function"]["name"], c["function"]["arguments"])
                       for c in body["tool_calls"]],
        "finish_reason": body["finish_reason"],
    }  # fmt: skip


def server_answer(base: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    request = {
        "model": "default",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    try:
        reply = httpx.post(f"{base}/v1/chat/completions", json=request, timeout=900)
    except httpx.HTTPError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    if reply.status_code != 200:
        return {"error": reply.text}
    choice = reply.json()["choices"][0]
    message = choice["message"]
    return {
        "content": message.get("content") or "",
        "reasoning": message.get("reasoning_content") or None,
        "tool_calls": [(c["function"]["name"], c["function"]["arguments"])
                       for c in message.get("tool_calls") or []],
        "finish_reason": choice["finish_reason"],
    }  # fmt: skip


def compare(
    model: str, prompts: list[str], max_tokens: int, env: dict[str, str], log: Path
) -> dict:
    mismatches = []
    port = free_port()
    with running(mlxd_serve(model, port), port, env, ready="/health", seconds=600, log=log) as base:
        for prompt in prompts:
            served = server_answer(base, prompt, max_tokens)
            local = cli_answer(model, prompt, max_tokens, env)
            if served != local:
                mismatches.append({"prompt": prompt, "cli": local, "server": served})
        gone = not _answers(base)
    return {
        "server_exited_early": gone,
        "server_log_tail": log.read_text()[-1500:] if gone else None,
        "model": model,
        "max_tokens": max_tokens,
        "prompts": len(prompts),
        "matches": len(prompts) - len(mismatches),
        "mismatches": mismatches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model reference (default: a tiny checkpoint)")
    parser.add_argument("--prompts", type=Path, help="file with one prompt per line")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    prompts = PROMPTS
    if args.prompts:
        prompts = [p for p in args.prompts.read_text().splitlines() if p.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        env.setdefault("MLXD_HOME", str(Path(tmp) / "home"))
        model = args.model or str(_tiny_model(Path(tmp)))
        result = compare(model, prompts, args.max_tokens, env, Path(tmp) / "serve.log")
    emit(result)
    sys.exit(1 if result["mismatches"] else 0)


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _tiny_model(tmp: Path) -> Path:
    from tests.checkpoints import make_checkpoint

    return make_checkpoint(tmp / "tiny-chat", "chat")


if __name__ == "__main__":
    main()
