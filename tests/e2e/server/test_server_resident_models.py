"""`mlxd serve --max-models 1`: requests alternate between two store models, each load
unloads the other (the preloaded model is pinned), and every request still succeeds."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.checkpoints import make_checkpoint
from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env


@pytest.fixture(scope="module")
def resident_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLXD_HOME whose store holds two distinct tiny chat models, 'alpha' and 'beta'."""
    home = tmp_path_factory.mktemp("resident-home")
    store = home / "mlxd" / "models"
    make_checkpoint(store / "alpha", "chat", seed=21)
    make_checkpoint(store / "beta", "chat", seed=22)
    return home


@pytest.fixture(scope="module")
def one_model_server(tiny_chat_model: Path, resident_home: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_chat_model), "--max-models", "1"], server_env(resident_home))
    yield srv
    srv.stop()


def ask(client: openai.OpenAI, model: str) -> str:
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=8,
        temperature=0,
    )
    assert model == "default" or r.model == model
    assert r.choices[0].finish_reason in ("stop", "length")
    return r.choices[0].message.content or ""


def test_alternating_models_all_succeed(one_model_server: ServerProcess) -> None:
    client = openai.OpenAI(
        base_url=one_model_server.base_url, api_key="unused", max_retries=0, timeout=120
    )
    first_alpha = ask(client, "alpha")
    ask(client, "beta")  # loading beta unloads alpha: one unpinned model at a time
    assert ask(client, "alpha") == first_alpha  # loaded again: same weights, same answer
    stream = client.chat.completions.create(
        model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    )
    assert [c for c in stream if c.choices and c.choices[0].delta.content]
    ask(client, "default")  # the pinned preloaded model is still there
    ids = [m.id for m in client.models.list().data]
    assert {"alpha", "beta"} <= set(ids)
    body = httpx.get(one_model_server.url + "/metrics", timeout=30).text
    assert metric(body, "mlxd_models_loaded") == 2  # the pinned default and beta


def test_concurrent_requests_for_two_models_all_succeed(one_model_server: ServerProcess) -> None:
    """Eight concurrent requests, two models, room for one besides the pinned default: loads
    happen while the other model's requests run or wait, and every request succeeds."""
    from concurrent.futures import ThreadPoolExecutor

    client = openai.OpenAI(
        base_url=one_model_server.base_url, api_key="unused", max_retries=0, timeout=120
    )
    names = ["alpha", "beta"] * 4
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(lambda name: ask(client, name), names))
    assert len(answers) == len(names)
    assert len(set(answers[0::2])) == 1 and len(set(answers[1::2])) == 1  # greedy, per model
    body = httpx.get(one_model_server.url + "/metrics", timeout=30).text
    assert metric(body, 'mlxd_requests_finished_total{reason="error"}') == 0


def test_a_bad_model_ttl_is_one_line(resident_home: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mlxd.cli.main", "serve", "--model-ttl", "soon", "--json"],
        env=server_env(resident_home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--model-ttl" in json.loads(lines[0])["error"]["message"]
