"""Format detection reads the vocabulary and the template text, never the model's name."""

from __future__ import annotations

import pytest

from mlxd.chat.formats import detect_formats, parse_json_call, parse_llama3
from mlxd.errors import InvalidRequest


class Tok:
    """A tokenizer as detection sees it: a vocabulary and a chat template."""

    def __init__(self, vocab: list[str], template: str | None = None, name: str = "") -> None:
        self._vocab = {t: i for i, t in enumerate(vocab)}
        self.chat_template = template
        self.name_or_path = name  # never consulted

    def get_vocab(self) -> dict[str, int]:
        return self._vocab


CASES = [
    # vocab, template, (reasoning, harmony, tool format name)
    (["<think>", "</think>", "<tool_call>"], None, (("<think>", "</think>"), False, "hermes")),
    (
        [],
        "{{ '<tool_call>' }}{{ '<think>' }}{{ '</think>' }}",
        (("<think>", "</think>"), False, "hermes"),
    ),
    (["<|channel|>", "<|message|>", "<think>", "</think>"], None, (None, True, None)),
    (["[TOOL_CALLS]"], None, (None, False, "mistral")),
    ([], "{% if tools %}[TOOL_CALLS]{% endif %}", (None, False, "mistral")),
    (["<|python_tag|>", "<|eot_id|>"], None, (None, False, "llama3")),
    (["<|eot_id|>"], '{"name": x, "parameters": y}', (None, False, "llama3")),
    (["hello"], "{{ messages }}", (None, False, None)),
    # Kimi-K2 instruct: the section token is in the vocabulary only, never in the template.
    (["<|tool_calls_section_begin|>"], "{{ messages }}", (None, False, "kimi_k2")),
]


@pytest.mark.parametrize(("vocab", "template", "expected"), CASES)
def test_chat_formats_detection(vocab, template, expected):
    formats = detect_formats(Tok(vocab, template, name="Qwen3-harmony-mistral-llama"))
    tool = formats.tool.name if formats.tool else None
    assert (formats.reasoning, formats.harmony, tool) == expected


class Wrapped(Tok):
    """mlx-lm's TokenizerWrapper as detection sees it: the parser mlx-lm inferred."""

    detokenizer = None

    def __init__(self, template: str, module: str) -> None:
        import importlib

        super().__init__(["<tool_call>", "</tool_call>"], template)
        mod = importlib.import_module(f"mlx_lm.tool_parsers.{module}")
        self.tool_call_start, self.tool_call_end = mod.tool_call_start, mod.tool_call_end
        self.tool_parser = mod.parse_tool_call


def test_chat_formats_mlx_lm_family_parser_is_never_replaced_by_hermes():
    glm = detect_formats(Wrapped("<tool_call>{{ name }}<arg_key>k</arg_key>", "glm47")).tool
    assert glm is not None and (glm.name, glm.start, glm.end) == (
        "glm47", "<tool_call>", "</tool_call>"
    )  # fmt: skip
    assert glm.parse("get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>") == [
        {"name": "get_weather", "arguments": {"city": "Paris"}}
    ]
    # mlx-lm's generic JSON parser is the one we replace: ours needs no template spelling.
    hermes = detect_formats(Wrapped("<tool_call>{{ tool_call.name }}", "json_tools")).tool
    assert hermes is not None and hermes.name == "hermes"


def test_chat_formats_explicit_reasoning_markers():
    tok = Tok(["<think>", "</think>"])
    assert detect_formats(tok, reasoning=None).reasoning is None
    assert detect_formats(tok, reasoning=("<r>", "</r>")).reasoning == ("<r>", "</r>")
    harmony = Tok(["<|channel|>", "<|message|>"])
    assert not detect_formats(harmony, reasoning=None).harmony
    with pytest.raises(InvalidRequest):
        detect_formats(tok, reasoning=("<r>",))


def test_chat_formats_json_parsers():
    assert parse_json_call('{"name": "f", "arguments": "{\\"a\\": 1}"}') == [
        {"name": "f", "arguments": {"a": 1}}
    ]
    assert parse_json_call('[{"name": "f", "id": "x"}]') == [
        {"name": "f", "arguments": {}, "id": "x"}
    ]
    assert parse_llama3('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {}}') == [
        {"name": "f", "arguments": {}},
        {"name": "g", "arguments": {}},
    ]
    for bad in ["", "[]", "{", '{"name": 1}', '{"name": "f", "arguments": [1]}']:
        with pytest.raises(ValueError):
            parse_json_call(bad)
