"""On the SmolLM2 demo model: `mlxd run` with no model name answers sensibly, and its
--json content equals the server's for the same greedy request (slow: marked demo)."""

from __future__ import annotations

import os

import openai
import pytest

from tests.e2e.cli.cli_helpers import SRC, one_json_line, run_mlxd
from tests.e2e.cli.serve_helper import mlxd_server

QUESTION = "What is the capital of France?"


@pytest.mark.demo
def test_default_model_answers_and_matches_the_server(demo_model) -> None:
    env = dict(
        os.environ,
        MLXD_HOME=str(demo_model.home),
        HF_HOME=str(demo_model.home / "hf"),
        HF_HUB_OFFLINE="1",
    )
    env["PYTHONPATH"] = SRC
    proc = run_mlxd(
        "run", QUESTION, "--json", "--temperature", "0", "--max-tokens", "24", env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["model"] == demo_model.name
    assert "Paris" in body["content"]

    with mlxd_server(demo_model.name, env, timeout=300) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=24,
            temperature=0,
        )
    assert body["content"] == reply.choices[0].message.content
    assert body["usage"]["completion_tokens"] == reply.usage.completion_tokens
