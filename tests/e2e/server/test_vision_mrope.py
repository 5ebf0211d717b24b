"""Images on M-RoPE models (tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL) through a real `mlxd serve`:
the openai client's image turns (streamed == whole), a concurrent mix of image and text
requests answering as each does alone, a second turn from the prefix cache, and `mlxd run
--json --image` with two pictures == the server's content."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.vision_checkpoints import png_bytes

QUESTION = "What is in this picture?"
PICTURES = {0: (56, 84), 1: (84, 56), 2: (70, 70)}  # seed -> (width, height)


def recurrent(model: Path) -> bool:
    """Qwen3.5 (gated delta-net layers): an image turn leaves no snapshot a later turn reuses,
    and the tiny checkpoint's answers hardly depend on the picture (mlx-vlm's own alike)."""
    return model.name == "tiny-qwen3_5"


def picture(seed: int) -> bytes:
    return png_bytes(seed, *PICTURES[seed])


def image_message(*seeds: int, text: str = QUESTION) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                            + base64.b64encode(picture(s)).decode()}}
        for s in seeds
    ]  # fmt: skip
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def server(
    tiny_mrope_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_mrope_model)], server_env(tmp_path_factory.mktemp("home")))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    return client.chat.completions.create(
        model="default", messages=messages, max_tokens=12, temperature=0, **extra
    )


def content(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
    text: str = ask(client, messages).choices[0].message.content
    return text


def test_image_turn_streamed_and_whole_and_a_second_turn_cached(
    client: openai.OpenAI, tiny_mrope_model: Path
) -> None:
    message = image_message(0)
    reply = ask(client, [message])
    chunks = ask(client, [message], stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reply.choices[0].message.content and streamed == reply.choices[0].message.content
    history = [message, {"role": "assistant", "content": reply.choices[0].message.content}]
    second = ask(client, [*history, image_message(1, text="And this one?")])
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= reply.usage.prompt_tokens - 1 or recurrent(tiny_mrope_model)


def test_concurrent_image_and_text_requests_answer_as_alone(
    client: openai.OpenAI, tiny_mrope_model: Path
) -> None:
    requests = [[image_message(s)] for s in (0, 1, 2, 0)]
    requests += [[{"role": "user", "content": t}] for t in ("Hi", "Numbers:", "Paris", "Ok")]
    alone = [content(client, r) for r in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda r: content(client, r), requests))
    assert together == alone
    assert len(set(alone[:3])) == 3 or recurrent(tiny_mrope_model)  # three pictures, three answers


def test_run_json_with_two_images_equals_server_content(
    client: openai.OpenAI, server: ServerProcess, tiny_mrope_model: Path, tmp_path: Path
) -> None:
    paths = []
    for seed in (1, 2):
        paths += ["--image", str(tmp_path / f"{seed}.png")]
        (tmp_path / f"{seed}.png").write_bytes(picture(seed))
    reply = ask(client, [image_message(1, 2)])
    proc = run_mlxd(
        "run", str(tiny_mrope_model), *paths, QUESTION,
        "--max-tokens", "12", "--temperature", "0", "--json", env=server.env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == reply.choices[0].message.content
    assert body["usage"]["prompt_tokens"] == reply.usage.prompt_tokens
