"""`mlxd serve` with no --model: the embedded SmolLM2 answers a real question (slow: demo)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.e2e.server.serverproc import launch, server_env


@pytest.mark.demo
def test_default_model_answers_capital_of_france(tmp_path: Path) -> None:
    srv = launch([], server_env(tmp_path))
    try:
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=600)
        assert [m.id for m in client.models.list()][0] == srv.model
        r = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=24,
            temperature=0,
        )
        assert "Paris" in (r.choices[0].message.content or "")
    finally:
        assert srv.stop(timeout=120) == 0
