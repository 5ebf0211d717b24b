"""`mlxd serve --max-models 1`: requests alternate between two store models, each load
unloads the other (the preloaded model is pinned), and every request still succeeds; a model
swapped out while a stream on it is in flight finishes that stream first."""

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
from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env, wait_for


@pytest.fixture(scope="module")
def resident_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLXD_HOME whose store holds two distinct tiny chat models, 'alpha' (with a 64k
    window: one request can decode for seconds) and 'beta'."""
    home = tmp_path_factory.mktemp("resident-home")
    store = home / "mlxd" / "models"
    make_checkpoint(store / "alpha", "chat", seed=21)
    make_checkpoint(store / "beta", "chat", seed=22)
    config = json.loads((store / "alpha" / "config.json").read_text())
    config["max_position_embeddings"] = 65536
    (store / "alpha" / "config.json").write_text(json.dumps(config))
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


def test_swap_with_a_stream_in_flight(one_model_server: ServerProcess) -> None:
    """A stream on alpha is in flight when a request for beta arrives: beta is loaded at once,
    alpha (chosen to go, but in use) stays loaded until its stream ends, that stream is the
    same as alpha's answer alone, and beta answers (after alpha's batch drains: the engine
    runs one model's batch at a time). Then alpha goes, and a request for it loads it again
    in beta's place."""
    from concurrent.futures import ThreadPoolExecutor

    client = openai.OpenAI(
        base_url=one_model_server.base_url, api_key="unused", max_retries=0, timeout=120
    )

    def gauge(name: str) -> float:
        return metric(httpx.get(one_model_server.url + "/metrics", timeout=30).text, name)

    long = dict(
        model="alpha", messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=1000, temperature=0, extra_body={"ignore_eos": True},
    )  # fmt: skip
    alone = client.chat.completions.create(**long).choices[0].message.content  # type: ignore[call-overload]
    beta_alone = ask(client, "beta")  # alpha goes: beta is the one unpinned model
    ask(client, "alpha")
    stream = client.chat.completions.create(stream=True, **long)  # type: ignore[call-overload]
    parts = []
    for chunk in stream:  # read until alpha's answer is streaming
        parts.append(chunk.choices[0].delta.content or "")
        if parts[-1]:
            break
    with ThreadPoolExecutor(1) as pool:
        during = pool.submit(ask, client, "beta")  # loads beta while alpha is in use
        wait_for(
            lambda: gauge("mlxd_models_loaded") == 3 or gauge("mlxd_running_requests") == 0,
            "beta to load, or alpha's stream to end",
        )
        # ~4 s of decoding for alpha, ~0.3 s to load beta: the stream is still going
        assert gauge("mlxd_running_requests") == 1, "alpha's stream ended before beta loaded"
        assert gauge("mlxd_models_loaded") == 3  # the pinned default, alpha and beta
        finishes = []
        for chunk in stream:
            parts.append(chunk.choices[0].delta.content or "")
            finishes.append(chunk.choices[0].finish_reason)
        assert during.result() == beta_alone  # beta answered, as it does alone
    assert "".join(parts) == alone  # alpha's stream went on intact
    assert finishes[-1] == "length"
    wait_for(lambda: gauge("mlxd_models_loaded") == 2, "alpha to go once its stream ended")
    ask(client, "alpha")  # alpha loaded again, in beta's place
    assert gauge("mlxd_models_loaded") == 2
    assert gauge('mlxd_requests_finished_total{reason="error"}') == 0


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
