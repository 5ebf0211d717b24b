"""What the vision server tests share: image messages, serving a model with its own home,
the openai client, a greedy ask, and `mlxd run --json --image ...` checked against the
server's reply."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.server.serverproc import ServerProcess, launch, server_env

QUESTION = "What is in this picture?"


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


def image_message(*urls: str, text: str = QUESTION) -> dict[str, Any]:
    """A user turn: each URL as an image_url part, then the text."""
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def home_with_text_model(
    tmp_path_factory: pytest.TempPathFactory, text_model: Path, name: str
) -> Path:
    """A fresh home whose store holds `text_model` as "tiny-text" (the text-only model the
    refusal tests ask for by name)."""
    home = tmp_path_factory.mktemp(name)
    shutil.copytree(text_model, home / "mlxd" / "models" / "tiny-text")
    return home


@contextmanager
def serving(model: Path, home: Path) -> Iterator[ServerProcess]:
    """`mlxd serve --model model` on `home`, stopped on leaving the block."""
    srv = launch(["--model", str(model)], server_env(home))
    try:
        yield srv
    finally:
        srv.stop()


def openai_client(server: ServerProcess, **options: Any) -> openai.OpenAI:
    """The openai client on `server`, never retrying (a retry would hide a failure)."""
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, **options)


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    """A greedy chat completion of at most 12 tokens on the default model."""
    return client.chat.completions.create(
        model="default", messages=messages, max_tokens=12, temperature=0, **extra
    )


def run_json_equals(reply: Any, model: Path, images: list[Path], env: dict[str, str]) -> Any:
    """`mlxd run model --image ... QUESTION --json` (greedy, 12 tokens) succeeds with the
    content and prompt tokens of `reply`; returns its JSON body for further checks."""
    flags = [arg for image in images for arg in ("--image", str(image))]
    proc = run_mlxd(
        "run", str(model), *flags, QUESTION,
        "--max-tokens", "12", "--temperature", "0", "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == reply.choices[0].message.content
    assert body["usage"]["prompt_tokens"] == reply.usage.prompt_tokens
    return body
