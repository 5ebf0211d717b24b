"""Images on M-RoPE models (tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL) through a real `mlxd serve`:
the openai client's image turns (streamed == whole), a concurrent mix of image and text
requests answering as each does alone, a second turn from the prefix cache, and `mlxd run
--json --image` with two pictures == the server's content."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess
from tests.e2e.server.vision_helpers import (
    QUESTION,
    ask,
    data_url,
    image_message,
    openai_client,
    run_json_equals,
    serving,
)
from tests.vision_checkpoints import png_bytes

PICTURES = {0: (56, 84), 1: (84, 56), 2: (70, 70)}  # seed -> (width, height)


def recurrent(model: Path) -> bool:
    """Qwen3.5 (gated delta-net layers): an image turn leaves no snapshot a later turn reuses,
    and the tiny checkpoint's answers hardly depend on the picture (mlx-vlm's own alike)."""
    return model.name == "tiny-qwen3_5"


def picture(seed: int) -> bytes:
    return png_bytes(seed, *PICTURES[seed])


def pictures_message(*seeds: int, text: str = QUESTION) -> dict[str, Any]:
    return image_message(*(data_url(picture(s)) for s in seeds), text=text)


@pytest.fixture(scope="module")
def server(
    tiny_mrope_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    with serving(tiny_mrope_model, tmp_path_factory.mktemp("home")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server)


def content(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
    text: str = ask(client, messages).choices[0].message.content
    return text


def test_image_turn_streamed_and_whole_and_a_second_turn_cached(
    client: openai.OpenAI, tiny_mrope_model: Path
) -> None:
    message = pictures_message(0)
    reply = ask(client, [message])
    chunks = ask(client, [message], stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reply.choices[0].message.content and streamed == reply.choices[0].message.content
    history = [message, {"role": "assistant", "content": reply.choices[0].message.content}]
    second = ask(client, [*history, pictures_message(1, text="And this one?")])
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= reply.usage.prompt_tokens - 1 or recurrent(tiny_mrope_model)


def test_concurrent_image_and_text_requests_answer_as_alone(
    client: openai.OpenAI, tiny_mrope_model: Path
) -> None:
    requests = [[pictures_message(s)] for s in (0, 1, 2, 0)]
    requests += [[{"role": "user", "content": t}] for t in ("Hi", "Numbers:", "Paris", "Ok")]
    alone = [content(client, r) for r in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda r: content(client, r), requests))
    assert together == alone
    assert len(set(alone[:3])) == 3 or recurrent(tiny_mrope_model)  # three pictures, three answers


def test_run_json_with_two_images_equals_server_content(
    client: openai.OpenAI, server: ServerProcess, tiny_mrope_model: Path, tmp_path: Path
) -> None:
    paths = [tmp_path / f"{seed}.png" for seed in (1, 2)]
    for seed, path in zip((1, 2), paths, strict=True):
        path.write_bytes(picture(seed))
    reply = ask(client, [pictures_message(1, 2)])
    run_json_equals(reply, tiny_mrope_model, paths, server.env)
