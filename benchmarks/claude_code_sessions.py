"""agent_loop_bench --shape claude-code: a Claude Code session shape through /v1/messages.

The recorded Claude Code 2.1.332 request (tests/e2e/server/recordings/claude_code_2_1_332.json:
its system blocks, tools and first user turn) with its system prompt padded to about
--prompt-tokens, then --turns turns in two sessions: each turn adds the model's answer with a
tool call and a ~200-token tool result; the second session starts again from the first user
turn, as a new `claude -p` would, with another billing header (system[0], which Claude Code
hashes from the prompt). Per turn: prompt tokens, cache_read_input_tokens and time to first
token, on one `mlxd serve` (--mlxd-src runs another checkout's, e.g. the one before the
billing header was normalised) serving a generated tiny checkpoint with a 64k window.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import PY, ROOT, agent_rules, free_port, isolated_env, running, tool_result

RECORDING = ROOT / "tests" / "e2e" / "server" / "recordings" / "claude_code_2_1_332.json"


def model_dir(work: Path) -> Path:
    """tiny-chat with a 64k window: the padded prompt fits (the demo model's window is 8k)."""
    from tests.checkpoints import make_checkpoint

    path = make_checkpoint(work / "tiny-long", "chat")
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 65536
    (path / "config.json").write_text(json.dumps(config))
    return path


def first_request(client: httpx.Client, url: str, target: int) -> dict[str, Any]:
    """The recording's request, its system prompt padded to about `target` tokens."""
    body = copy.deepcopy(json.loads(RECORDING.read_text())["request"])
    for key in ("thinking", "context_management", "metadata"):
        body.pop(key, None)
    body.update(model="default", max_tokens=8, messages=body["messages"][:1])
    base = count(client, url, body)
    body["system"].append({"type": "text", "text": agent_rules(10)})
    per_rule = max(1, (count(client, url, body) - base) // 10)  # tokens of one rule here
    body["system"][-1]["text"] = agent_rules(max(1, (target - base) // per_rule))
    return body


def count(client: httpx.Client, url: str, body: dict[str, Any]) -> int:
    fields = {k: body[k] for k in ("model", "system", "tools", "messages")}
    r = client.post(url + "/v1/messages/count_tokens", json=fields)
    r.raise_for_status()
    return int(r.json()["input_tokens"])


def header(session: int) -> str:
    digest = f"{(session * 2654435761) % 4096:03x}"
    return f"x-anthropic-billing-header: cc_version=2.1.332.{digest}; cc_entrypoint=sdk-cli;"


def sessions(client: httpx.Client, url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from benchmarks.agent_loop_bench import send

    start = first_request(client, url, args.prompt_tokens)
    tool = start["tools"][0]["name"]
    rows: list[dict[str, Any]] = []
    per_session = -(-args.turns // 2)
    body: dict[str, Any] = {}
    for turn in range(args.turns):
        session, step = divmod(turn, per_session)
        if step == 0:  # a new session: the first user turn again, another billing header
            body = copy.deepcopy(start)
            body["system"][0]["text"] = header(session + 1)
        t = send(client, url, body)
        rows.append(
            {
                "turn": turn + 1,
                "session": session + 1,
                "prompt_tokens": t.prompt_tokens,
                "cache_read_input_tokens": t.cache_read,
                "ttft_s": round(t.ttft_s, 4),
            }
        )
        call = {"type": "tool_use", "id": f"toolu_{session}_{step}", "name": tool, "input": {}}
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": tool_result(step, 6)}
        answer = [{"type": "text", "text": t.text or "Looking."}, call]
        body["messages"] = body["messages"] + [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": [result]},
        ]
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = model_dir(work)
        port = free_port()
        env = isolated_env(work)
        if args.mlxd_src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(args.mlxd_src) / "src"), str(ROOT)])
        cmd = [PY, "-m", "mlxd.cli.main", "serve", "--model", str(model), "--port", str(port)]
        with running(cmd, port, env, ready="/health", seconds=600, log=work / "serve.log") as url:
            with httpx.Client(timeout=600) as client:
                rows = sessions(client, url, args)
    second = rows[-(args.turns // 2)] if args.turns > 1 else rows[0]
    return {
        "shape": "claude-code",
        "mlxd_src": args.mlxd_src or "this checkout",
        "turns": rows,
        "new_session_cache_read": second["cache_read_input_tokens"],
        "new_session_prompt_tokens": second["prompt_tokens"],
    }


if __name__ == "__main__":  # the same as agent_loop_bench --shape claude-code
    import sys

    from benchmarks.agent_loop_bench import main

    sys.argv[1:1] = ["--shape", "claude-code"]
    main()
