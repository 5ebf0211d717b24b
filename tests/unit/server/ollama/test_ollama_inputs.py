"""Ollama's request shapes into the chat layer's: names, options, format, messages."""

from __future__ import annotations

import base64
import json
import math

import pytest

from mlxd.errors import InvalidRequest
from mlxd.server.ollama.fill_in import fill_in_prompt
from mlxd.server.ollama.inputs import chat_messages, format_option, generate_messages
from mlxd.server.ollama.schemas import OllamaChatRequest, OllamaGenerateRequest, served_name
from mlxd.server.request_inputs import parse
from mlxd.server.settings import ServerSettings

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def test_latest_is_the_default_tag() -> None:
    assert served_name("llama3.2:latest") == "llama3.2"
    assert served_name("qwen3:0.6b") == "qwen3:0.6b"
    req = parse(OllamaChatRequest, b'{"model": "tiny:latest"}', ServerSettings())
    assert req.model == "tiny" and req.stream is True and req.messages == []


def test_options_go_through_the_one_table() -> None:
    body = (
        b'{"model": "m", "messages": [], "options": {"temperature": 0, "num_predict": 5, '
        b'"repeat_penalty": 1.1, "repeat_last_n": 32, "stop": "x", "num_ctx": 4096, '
        b'"num_gpu": 99, "seed": 3}, "format": "json", "think": false}'
    )
    req = parse(OllamaChatRequest, body, ServerSettings())
    assert req.options() == {
        "temperature": 0,
        "max_tokens": 5,
        "repetition_penalty": 1.1,
        "repeat_last_n": 32,  # the option of llama.cpp's name: repetition_context_size
        "stop": ["x"],
        "seed": 3,
        "response_format": {"type": "json_object"},
    }
    assert req.template_kwargs() == {"enable_thinking": False}
    unlimited = parse(OllamaChatRequest, b'{"model": "m", "options": {"num_predict": -1}}',
                      ServerSettings())  # fmt: skip
    assert "max_tokens" not in unlimited.options()


def test_format_schema_and_none() -> None:
    schema = {"type": "object"}
    assert format_option(schema) == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }
    assert format_option("") is None and format_option(None) is None


def test_images_become_data_url_parts() -> None:
    encoded = base64.b64encode(PNG).decode()
    (msg,) = chat_messages([{"role": "user", "content": "what?", "images": [encoded]}])
    image, text = msg["content"]
    assert text == {"type": "text", "text": "what?"}
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    with pytest.raises(InvalidRequest) as bad:
        chat_messages([{"role": "user", "content": "x", "images": ["not base64!"]}])
    assert bad.value.param == "messages.0.images.0"


def test_tool_results_answer_their_calls_by_name() -> None:
    call = {"function": {"name": "a", "arguments": {}}}
    other = {"function": {"name": "b", "arguments": {"x": 1}}}
    msgs = chat_messages(
        [
            {"role": "assistant", "content": "", "tool_calls": [call, other]},
            {"role": "tool", "content": "B", "tool_name": "b"},
            {"role": "tool", "content": "A"},
        ]
    )
    ids = [c["id"] for c in msgs[0]["tool_calls"]]
    assert msgs[1]["tool_call_id"] == ids[1] and msgs[1]["name"] == "b"
    assert msgs[2]["tool_call_id"] == ids[0]


def test_generate_refuses_what_it_cannot_honour() -> None:
    for field in ("context", "template"):
        with pytest.raises(InvalidRequest) as err:
            parse(OllamaGenerateRequest, f'{{"model": "m", "{field}": "x"}}'.encode(),
                  ServerSettings())  # fmt: skip
        assert err.value.param == field
    assert generate_messages("hi", "sys", None) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize(
    ("sent", "seconds"),
    [("5m", 300.0), ("1h30m", 5400.0), ("0", 0.0), (0, 0.0), (300, 300.0), (2.5, 2.5),
     (-1, math.inf), ("-1", math.inf), ("-1m", math.inf)],
)  # fmt: skip
def test_keep_alive_spellings(sent: object, seconds: float) -> None:
    body = json.dumps({"model": "m", "keep_alive": sent}).encode()
    assert parse(OllamaGenerateRequest, body, ServerSettings()).keep_alive == seconds


@pytest.mark.parametrize("sent", ["5 parsecs", "", "m", True, [1]])
def test_bad_keep_alive_is_refused_by_name(sent: object) -> None:
    body = json.dumps({"model": "m", "keep_alive": sent}).encode()
    with pytest.raises(InvalidRequest) as err:
        parse(OllamaChatRequest, body, ServerSettings())
    assert err.value.param == "keep_alive"


@pytest.mark.parametrize(
    ("vocab", "prompt"),
    [({"<|fim_prefix|>": 1, "<|fim_suffix|>": 2, "<|fim_middle|>": 3},
      "<|fim_prefix|>AB<|fim_suffix|>CD<|fim_middle|>"),
     ({"<fim_prefix>": 1, "<fim_suffix>": 2, "<fim_middle>": 3},
      "<fim_prefix>AB<fim_suffix>CD<fim_middle>"),
     ({"[PREFIX]": 1, "[SUFFIX]": 2}, "[SUFFIX]CD[PREFIX]AB")],
)  # fmt: skip
def test_fill_in_the_middle_prompts(vocab: dict[str, int], prompt: str) -> None:
    assert fill_in_prompt(Vocab(vocab), "AB", "CD") == prompt  # type: ignore[arg-type]


def test_fill_in_needs_all_of_a_familys_tokens() -> None:
    with pytest.raises(InvalidRequest) as err:
        fill_in_prompt(Vocab({"<|fim_prefix|>": 1, "<|fim_suffix|>": 2}), "a", "b")  # type: ignore[arg-type]
    assert err.value.param == "suffix"


class Vocab:
    """The one Tokenizer method fill_in reads."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return self.vocab
