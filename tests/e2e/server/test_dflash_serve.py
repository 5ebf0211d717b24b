"""`mlxd serve --draft-model DRAFTER` with a DFlash drafter (issue 27, kind `dflash`): the
drafter is named with its kind in the start-up line and /v1/models; greedy answers are the
same with and without it, the request field turns it on and off, /metrics counts its drafts
by kind; `run --draft-model DRAFTER --json` times them under kind dflash. Real `mlxd serve`
and `mlxd run` processes, the openai client, the repeater pair (tests.dflash_checkpoints)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.dflash_checkpoints import make_repeater_pair
from tests.e2e.cli.cli_helpers import run_mlxd
from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env

QUESTION = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_repeater_pair(tmp_path_factory.mktemp("dflash-pair"))


@pytest.fixture(scope="module")
def dflash_server(
    pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("dflash-home")
    target, drafter = pair
    args = ["--model", str(target), "--draft-model", str(drafter), "--num-draft-tokens", "4"]
    srv = launch(args, server_env(home))
    yield srv
    srv.stop()


def test_drafter_is_named_and_greedy_answers_match(dflash_server: ServerProcess) -> None:
    import openai

    draft = {
        "model": "repeater-dflash",
        "kind": "dflash",
        "num_draft_tokens": 4,
        "kv_bytes_per_token": 2560,
    }
    assert any("(draft repeater-dflash, dflash, 4 tokens)" in line for line in dflash_server.stderr)
    models = httpx.get(dflash_server.base_url + "/models").json()["data"]
    assert models[0]["draft"] == draft
    client = openai.OpenAI(base_url=dflash_server.base_url, api_key="x", max_retries=0, timeout=120)

    def answer(**extra: object) -> str:
        done = client.chat.completions.create(
            model="repeater", messages=QUESTION, max_tokens=24, temperature=0, extra_body=extra
        )
        return done.choices[0].message.content or ""

    plain = answer(draft_kind="none")
    text = httpx.get(dflash_server.url + "/metrics").text
    assert metric(text, 'mlxd_draft_tokens_by_kind_total{kind="dflash"}') == 0
    assert answer() == plain  # the server's default kind with a DFlash drafter: dflash
    assert answer(draft_kind="dflash", num_draft_tokens=2) == plain
    text = httpx.get(dflash_server.url + "/metrics").text
    drafted = metric(text, 'mlxd_draft_tokens_by_kind_total{kind="dflash"}')
    assert drafted > 0
    assert metric(text, 'mlxd_accepted_draft_tokens_by_kind_total{kind="dflash"}') == drafted
    bad = httpx.post(
        dflash_server.base_url + "/chat/completions",
        json={"model": "repeater", "messages": QUESTION, "max_tokens": 4, "draft_kind": "model"},
    )
    assert bad.status_code == 400 and "is not a draft model" in bad.text


def test_run_times_dflash_drafts(pair: tuple[Path, Path], tmp_path: Path) -> None:
    target, drafter = pair
    proc = run_mlxd(
        "run", str(target), "hello there", "--max-tokens", "16", "--temperature", "0",
        "--ignore-eos", "--draft-model", str(drafter), "--json", env=server_env(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    timings = json.loads(proc.stdout)["timings"]
    assert timings["draft_kind"] == "dflash" and timings["draft_tokens"] > 0
