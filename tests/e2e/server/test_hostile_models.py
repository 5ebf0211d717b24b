"""A hostile model in the store must be refused before any load, alone: the server, run
under a memory cap (so a regression fails here instead of taking the machine down), keeps
serving its other models and /health stays ok."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.hostile import hostile_copy, memory_capped

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def capped_server(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("hostile-home")
    store = home / "mlxd" / "models"
    store.mkdir(parents=True)
    for how in ("layers", "layers_float", "huge_weights"):
        hostile_copy(tiny_chat_model, store / f"hostile-{how}", how)
    srv = launch(["--model", str(tiny_chat_model)], server_env(home), preexec_fn=memory_capped())
    yield srv
    srv.stop()


def chat(server: ServerProcess, model: str) -> httpx.Response:
    body = {"model": model, "messages": USER, "max_tokens": 2}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("hostile-layers", "1000000000 layers"),
        ("hostile-layers_float", "num_hidden_layers"),
        ("hostile-huge_weights", "memory"),
    ],
)
def test_hostile_model_is_refused_and_fails_alone(
    capped_server: ServerProcess, model: str, words: str
) -> None:
    r = chat(capped_server, model)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert words in err["message"]
    assert err["code"] in ("model_unusable", "model_too_large")
    # The refusal is its own: the server and its other model are fine.
    assert capped_server.proc.poll() is None
    assert httpx.get(capped_server.url + "/health", timeout=30).status_code == 200
    assert chat(capped_server, "default").status_code == 200
    listed = httpx.get(capped_server.base_url + "/models", timeout=30).json()["data"]
    assert model in [m["id"] for m in listed]  # listed (broken entries are never hidden)
