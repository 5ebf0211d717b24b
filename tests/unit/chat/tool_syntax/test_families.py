"""The vendor tool-call syntaxes of chat.tool_syntax: recognised from the template text or the
vocabulary, parsed into exact calls (several per turn, nested JSON, quotes, non-ASCII, typed
XML parameters), and the same calls whatever way the text is split while streaming."""

from __future__ import annotations

import json

import pytest

from mlxd.chat.formats import detect_formats
from mlxd.chat.parser import OutputParser, merge_events, parse_output
from mlxd.chat.tool_syntax.deepseek import parse_deepseek
from mlxd.types import ReasoningDelta, TextDelta, ToolCall, Warning
from tests.unit.chat.test_chat_formats import Tok

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "where": {"type": "object"},
                },
            },
        },
    }
]
NESTED = {"city": 'São "Paulo"', "where": {"lat": -23.5, "tags": ["a", {"b": None}]}}
DS_BEGIN, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _v31(name: str, args: dict) -> str:
    return f"{DS_CALL}{name}{DS_SEP}{json.dumps(args, ensure_ascii=False)}{DS_CALL_END}"


def _v3(name: str, args: dict) -> str:
    body = json.dumps(args, ensure_ascii=False)
    return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{body}\n```{DS_CALL_END}"


def _json_list(*calls: tuple[str, dict]) -> str:
    return json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)


def _seed(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


TWO = [("get_weather", NESTED), ("get_time", {"zone": "東京"})]
# name, vocabulary, template, output, expected calls
CASES = [
    (
        "deepseek-v3.1",
        [DS_BEGIN],
        "",
        f"Let me check.{DS_BEGIN}{_v31(*TWO[0])}{_v31(*TWO[1])}{DS_END}",
        TWO,
    ),
    ("deepseek-v3", [], f"{{{{ '{DS_BEGIN}' }}}}", f"{DS_BEGIN}{_v3(*TWO[0])}\n{DS_END}", TWO[:1]),
    (
        "phi4",
        ["<|tool_call|>", "<|/tool_call|>"],
        "",
        "".join(f"<|tool_call|>{_json_list(c)[1:-1]}<|/tool_call|>" for c in TWO),
        TWO,
    ),
    ("nemotron", [], "<TOOLCALL></TOOLCALL>", f"<TOOLCALL>{_json_list(*TWO)}</TOOLCALL>", TWO),
    (
        "command_r",
        ["<|START_ACTION|>"],
        "",
        "<|START_ACTION|>"
        + json.dumps([{"tool_call_id": "0", "tool_name": n, "parameters": a} for n, a in TWO])
        + "<|END_ACTION|>",
        TWO,
    ),
    ("granite", ["<|tool_call|>"], "", f"<|tool_call|>{_json_list(*TWO)}", TWO),
    (
        "seed_oss",
        ["<seed:tool_call>"],
        "",
        _seed("get_weather", city="Zürich", days="3", metric="true", where='{"lat": 47.4}')
        + _seed("get_time", zone="UTC"),
        [
            ("get_weather", {"city": "Zürich", "days": 3, "metric": True, "where": {"lat": 47.4}}),
            ("get_time", {"zone": "UTC"}),
        ],
    ),
]


def _calls(events: list) -> list[tuple[str, dict]]:
    return [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCall)]


@pytest.mark.parametrize(("name", "vocab", "template", "text", "expected"), CASES)
def test_tool_syntax_calls_are_exact_in_any_split(name, vocab, template, text, expected):
    formats = detect_formats(Tok(vocab, template), tools=TOOLS)
    assert formats.tool is not None and formats.tool.name == name.split("-")[0]
    whole = parse_output(text, formats, tools=True, new_id=lambda: "call_1")
    assert _calls(whole) == expected
    assert not [e for e in whole if isinstance(e, Warning)]
    assert "".join(e.text for e in whole if isinstance(e, TextDelta)).strip() in (
        "",
        "Let me check.",
    )
    for cut in range(1, len(text)):
        parser = OutputParser(formats, tools=True, new_id=lambda: "call_1")
        events = merge_events(parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.flush())
        assert events == whole, f"split@{cut}"


def test_tool_syntax_deepseek_block_that_is_no_call_is_refused():
    for body in ("text", f"{DS_CALL}f{DS_CALL_END}", f"{DS_CALL}f{DS_SEP}[1]{DS_CALL_END}"):
        with pytest.raises(ValueError):
            parse_deepseek(body)
    assert parse_deepseek(f"{DS_CALL}f{DS_SEP}{DS_CALL_END}") == [{"name": "f", "arguments": {}}]


def test_tool_syntax_unparsable_call_stays_text_with_a_warning():
    formats = detect_formats(Tok(["<TOOLCALL>", "</TOOLCALL>"]), tools=TOOLS)
    events = parse_output("<TOOLCALL>[{oops</TOOLCALL>", formats, tools=True)
    assert isinstance(events[0], Warning) and "nemotron" in events[0].message
    assert events[1:] == [TextDelta("<TOOLCALL>[{oops</TOOLCALL>")]


@pytest.mark.parametrize(
    ("vocab", "template", "expected"),
    [
        # Phi-4-mini's start token is Granite's too; the end token tells them apart.
        (["<|tool_call|>", "<|/tool_call|>"], "", "phi4"),
        ([], "<|tool_call|>{{ x }}<|/tool_call|>", "phi4"),
        ([], "{{ '<|tool_call|>' }}", "granite"),
        # Seed-OSS's template spells qwen3_coder's "<tool_call>\\n<function=" inside its own.
        ([], "{{ '<seed:tool_call>\\n<function=f>' }}", "seed_oss"),
        (["<｜tool▁calls▁begin｜>"], "{{ messages }}", "deepseek"),
    ],
)
def test_tool_syntax_detection_from_template_or_vocabulary(vocab, template, expected):
    tool = detect_formats(Tok(vocab, template)).tool
    assert tool is not None and tool.name == expected


@pytest.mark.parametrize(
    ("vocab", "template", "expected"),
    [
        (["<seed:think>", "</seed:think>"], "", ("<seed:think>", "</seed:think>")),
        ([], "<|START_THINKING|><|END_THINKING|>", ("<|START_THINKING|>", "<|END_THINKING|>")),
        (["<think>", "</think>", "<seed:think>", "</seed:think>"], "", ("<think>", "</think>")),
    ],
)
def test_tool_syntax_other_reasoning_markers(vocab, template, expected):
    assert detect_formats(Tok(vocab, template)).reasoning == expected


def test_command_r_response_tags_are_layout_in_any_split():
    tok = Tok(["<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>"])
    formats = detect_formats(tok)
    assert formats.layout == ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
    text = "<|START_THINKING|>Plan.<|END_THINKING|><|START_RESPONSE|>Hi there.<|END_RESPONSE|>"
    whole = parse_output(text, formats)
    assert whole == [ReasoningDelta("Plan."), TextDelta("Hi there.")]
    for cut in range(1, len(text)):
        parser = OutputParser(formats)
        assert (
            merge_events(parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.flush())
            == whole
        )


def test_command_r_plus_action_list_and_directly_answer():
    template = "Write 'Action:' ... use the `directly-answer` tool ..."
    formats = detect_formats(Tok([], template), tools=TOOLS)
    assert formats.tool is not None and formats.tool.name == "command_r_plus"
    call = '{"tool_name": "f", "parameters": {"q": "ü \\"x\\""}}'
    events = merge_events(parse_output(f"Action:\n```json\n[{call}]\n```", formats, tools=True))
    assert [(c.name, json.loads(c.arguments)) for c in events if isinstance(c, ToolCall)] == [
        ("f", {"q": 'ü "x"'})
    ]
    direct = '[{"tool_name": "directly-answer", "parameters": {}}]'
    events = parse_output(f"Action:\n```json\n{direct}\n```", formats, tools=True)
    assert not [e for e in events if isinstance(e, ToolCall)]


def test_granite_response_tags_are_layout_but_minimax_tool_results_are_not():
    granite = "Write your thoughts between <think></think> and <response></response>."
    assert detect_formats(Tok([], granite)).layout == ("<response>", "</response>")
    minimax = "{{ '<response>' }}{{ message.content }}{{ '</response>' }}"
    assert detect_formats(Tok([], minimax)).layout == ()
    text = "<think>Plan.</think><response>Hi.</response>"
    assert parse_output(text, detect_formats(Tok([], granite))) == [
        ReasoningDelta("Plan."),
        TextDelta("Hi."),
    ]


def test_named_templates_pick_tool_use_for_a_request_with_tools():
    # As Hugging Face picks: Command R+ ships default, tool_use and rag templates.
    from mlxd.chat.builder import render_chat_text

    tok = Tok([], None)
    tok.chat_template = {  # type: ignore[assignment]
        "default": "D:{{ messages[0].content }}",
        "tool_use": "T:{{ tools | length }} use `directly-answer`, write 'Action:'",
    }
    msgs = [{"role": "user", "content": "hi"}]
    assert render_chat_text(tok, msgs, None, {}) == "D:hi"
    assert render_chat_text(tok, msgs, TOOLS, {}).startswith(f"T:{len(TOOLS)} ")
    assert detect_formats(tok).tool is None
    tool = detect_formats(tok, tools=TOOLS).tool
    assert tool is not None and tool.name == "command_r_plus"
