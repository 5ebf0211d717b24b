"""Images through /v1/messages and /v1/responses on a real `mlxd serve` of the tiny llava
checkpoint: the same picture and question give the same greedy answer as
/v1/chat/completions, and images where they cannot go get each API's own 400."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess
from tests.e2e.server.vision_helpers import (
    QUESTION,
    ask,
    data_url,
    home_with_text_model,
    image_message,
    openai_client,
    serving,
)
from tests.vision_checkpoints import png_bytes

PICTURE = png_bytes(21)
B64 = base64.b64encode(PICTURE).decode()
DATA_URL = data_url(PICTURE)
IMAGE_BLOCK = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": B64},
}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_vision_model: Path, tiny_chat_model: Path
) -> Iterator[ServerProcess]:
    home = home_with_text_model(tmp_path_factory, tiny_chat_model, "vision-apis-home")
    with serving(tiny_vision_model, home) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server, timeout=120)


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def chat_answer(client: openai.OpenAI) -> tuple[str, int]:
    r = ask(client, [image_message(DATA_URL)])
    assert r.usage is not None
    return r.choices[0].message.content or "", r.usage.prompt_tokens


def test_messages_image_block_equals_chat(
    client: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    text, prompt_tokens = chat_answer(client)
    assert text
    messages: Any = [{"role": "user", "content": [IMAGE_BLOCK, {"type": "text", "text": QUESTION}]}]
    kw: dict[str, Any] = dict(
        model="default", max_tokens=12, messages=messages, extra_body={"temperature": 0.0}
    )
    m = claude.messages.create(**kw)
    assert "".join(b.text for b in m.content if b.type == "text") == text
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == prompt_tokens
    with claude.messages.stream(**kw) as stream:
        streamed = stream.get_final_message()
    assert "".join(b.text for b in streamed.content if b.type == "text") == text
    counted = claude.messages.count_tokens(model="default", messages=messages)
    assert counted.input_tokens == prompt_tokens  # the image's positions are counted too


def test_responses_input_image_equals_chat(client: openai.OpenAI) -> None:
    text, prompt_tokens = chat_answer(client)
    r = client.responses.create(
        model="default",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
                    {"type": "input_text", "text": QUESTION},
                ],
            }
        ],
        max_output_tokens=12,
        temperature=0,
    )
    assert r.output_text == text
    assert r.usage is not None and r.usage.input_tokens == prompt_tokens


def test_images_where_they_cannot_go(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url + "/v1", timeout=60) as http:
        call = {"type": "tool_use", "id": "t1", "name": "look", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [IMAGE_BLOCK]}
        cases: list[tuple[str, dict[str, Any]]] = [
            (  # an image in a tool result
                "/messages",
                {
                    "max_tokens": 4,
                    "messages": [
                        {"role": "user", "content": "Look."},
                        {"role": "assistant", "content": [call]},
                        {"role": "user", "content": [result]},
                    ],
                },
            ),
            (  # an image from the assistant
                "/messages",
                {
                    "max_tokens": 4,
                    "messages": [
                        {"role": "user", "content": "Draw."},
                        {"role": "assistant", "content": [IMAGE_BLOCK]},
                        {"role": "user", "content": "Again."},
                    ],
                },
            ),
            (  # to a text-only model
                "/messages",
                {
                    "model": "tiny-text",
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": [IMAGE_BLOCK]}],
                },
            ),
            (  # an uploaded file
                "/responses",
                {
                    "input": [
                        {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}
                    ]
                },
            ),
            (  # to a text-only model
                "/responses",
                {
                    "model": "tiny-text",
                    "input": [
                        {
                            "role": "user",
                            "content": [{"type": "input_image", "image_url": DATA_URL}],
                        }
                    ],
                },
            ),
        ]
        for path, body in cases:
            r = http.post(path, json=body)
            assert r.status_code == 400, (path, r.text)
            err = r.json()
            if path == "/messages":
                assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
            else:
                assert err["error"]["code"] == "invalid_request" and err["error"]["message"]
        ok = http.post(
            "/messages", json={"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        )
        assert ok.status_code == 200


def test_ollama_images_equal_chat(client: openai.OpenAI, server: ServerProcess) -> None:
    import ollama

    text, prompt_tokens = chat_answer(client)
    lama = ollama.Client(host=server.url, timeout=120)
    message = {"role": "user", "content": QUESTION, "images": [PICTURE]}
    r = lama.chat(
        model="default", messages=[message], options={"temperature": 0, "num_predict": 12}
    )
    assert r.message.content == text and r.prompt_eval_count == prompt_tokens
    g = lama.generate(model="default", prompt=QUESTION, images=[PICTURE],
                      options={"temperature": 0, "num_predict": 12})  # fmt: skip
    assert g.response == text
    with pytest.raises(ollama.ResponseError) as text_only:
        lama.chat(model="tiny-text", messages=[message])
    assert text_only.value.status_code == 400 and "image" in text_only.value.error
