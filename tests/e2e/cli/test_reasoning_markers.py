"""--reasoning-start/--reasoning-end on run and serve: markers the template does not reveal
split the reasoning and carry the reasoning budget, the same on the CLI and the server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.cli.serve_helper import mlxd_server
from tests.integration.chat.scripted import make_scripted_checkpoint

# Reasons forever between markers its ChatML template never names ("<think>" is what mlxd
# would detect); only a budget gets it to the answer.
SCRIPT = ["[[", "Hmm", " more", "]]", "Paris", "."]
MARKERS = ("--reasoning-start", "[[", "--reasoning-end", "]]")


def thought(n: int) -> str:
    return "".join((["Hmm", " more"] * n)[:n])


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("markers") / "ponder-brackets"
    return make_scripted_checkpoint(path, SCRIPT, successors={" more": "Hmm"})


def test_run_splits_and_budgets_with_the_given_markers(
    model: Path, cli_env: dict[str, str]
) -> None:
    args = ("run", str(model), "hi", "--json", "--max-reasoning-tokens", "3")
    proc = run_mlxd(*args, *MARKERS, env=cli_env)
    assert proc.returncode == 0, proc.stderr
    answer = one_json_line(proc.stdout)
    assert (answer["reasoning"], answer["content"]) == (thought(3), "Paris.")
    plain = run_mlxd("run", str(model), "hi", "--json", "--max-tokens", "6", env=cli_env)
    assert one_json_line(plain.stdout)["content"].startswith("[[Hmm more")  # no split


def test_one_marker_alone_is_refused(model: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd("run", str(model), "hi", "--reasoning-start", "[[", env=cli_env)
    assert proc.returncode != 0 and "--reasoning-end" in proc.stderr


def test_serve_uses_the_markers_for_every_request(model: Path, cli_env: dict[str, str]) -> None:
    with mlxd_server(model, cli_env, extra=MARKERS) as base:
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "max_reasoning_tokens": 3,
        }
        reply = httpx.post(f"{base}/chat/completions", json=body, timeout=120).json()
    message = reply["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (thought(3), "Paris.")
