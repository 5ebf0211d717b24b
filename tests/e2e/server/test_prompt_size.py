"""Prompts cost far more memory than their size while they tokenize (~200 bytes per byte), so
one that cannot fit the context window is refused before it is tokenized, and large ones
tokenize in turns. Under a 3 GiB address-space cap, 8 concurrent 3.8 MB prompts through every
API get the ContextOverflow 400 at once, and the server keeps serving (the old code tokenized
them all at once and aborted inside the tokenizer)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.hostile import memory_capped

PROMPT_CHARS = 3_800_000  # within the 4 MiB body cap
WINDOW = 2048  # tiny-chat's context window
ONE_TOKENIZATION = 250  # bytes of memory per byte of prompt while it tokenizes, at most


def big_text(i: int, chars: int = PROMPT_CHARS) -> str:
    words = f"request {i} says hello to the quick brown fox "
    return (words * (chars // len(words) + 1))[:chars]


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


APIS: dict[str, Callable[[str], dict[str, Any]]] = {
    "/chat/completions": lambda text: {"messages": _user(text), "max_tokens": 4},
    "/completions": lambda text: {"prompt": text, "max_tokens": 4},
    "/messages": lambda text: {"messages": _user(text), "max_tokens": 4},
    "/messages/count_tokens": lambda text: {"messages": _user(text)},
    "/responses": lambda text: {"input": text, "max_output_tokens": 4},
}


@pytest.fixture(scope="module")
def capped(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("prompt-size")
    store = home / "mlxd" / "models"
    shutil.copytree(tiny_chat_model, store / "tiny-huge")  # a window no 4 MiB body fills
    config = json.loads((store / "tiny-huge" / "config.json").read_text())
    config["max_position_embeddings"] = 1 << 24
    (store / "tiny-huge" / "config.json").write_text(json.dumps(config))
    env = server_env(home, MLXD_TOKENIZE_BYTES=str(PROMPT_CHARS))
    srv = launch(["--model", str(tiny_chat_model)], env, preexec_fn=memory_capped())
    yield srv
    srv.stop()


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=300)


def alive(server: ServerProcess) -> None:
    assert server.proc.poll() is None, "".join(server.stderr)
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    r = post(server, "/chat/completions", {"messages": _user("hi"), "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_prompts_past_the_window_are_refused_before_tokenizing(capped: ServerProcess) -> None:
    paths = [list(APIS)[i % len(APIS)] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda ip: post(capped, ip[1], APIS[ip[1]](big_text(ip[0]))),
                                enumerate(paths)))  # fmt: skip
    for path, r in zip(paths, answers, strict=True):
        assert r.status_code == 400, (path, r.text[:300])
        message = r.json()["error"]["message"]
        if path.startswith("/messages"):  # Anthropic's words (Claude Code parses them)
            assert re.fullmatch(rf"prompt is too long: \d+ tokens > {WINDOW - 1} maximum", message)
        else:  # OpenAI's
            assert "at least" in message, message
            assert f"maximum context length is {WINDOW} tokens" in message, message
    alive(capped)


def test_large_prompts_that_fit_tokenize_in_turns(capped: ServerProcess) -> None:
    """A window they fit: each is tokenized and counted, one at a time (MLXD_TOKENIZE_BYTES):
    the server's resident peak grows by about one tokenization, not eight (the old code's
    grew by 1.7 GB here)."""
    before = peak_rss(capped)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda i: post(capped, "/messages/count_tokens",
                           {"model": "tiny-huge", "messages": _user(big_text(i, 2_000_000))}),
            range(8),
        ))  # fmt: skip
    counts = []
    for r in answers:
        assert r.status_code == 200, r.text[:300]
        counts.append(r.json()["input_tokens"])
    assert min(counts) > WINDOW
    grown = peak_rss(capped) - before
    assert grown < ONE_TOKENIZATION * 2_000_000 * 2, f"peak RSS grew {grown >> 20} MiB"
    alive(capped)


def peak_rss(server: ServerProcess) -> int:
    """The server process's resident high-water mark, in bytes (Linux)."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) << 10
