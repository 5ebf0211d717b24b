"""Table-driven streaming tests for the pure output parser (text in, events out).

Every case is fed whole, one character at a time, and split at every position (so inside
every marker and stop string) and must give the same events as the expected list.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.chat.formats import HERMES, LLAMA3, MISTRAL, Formats
from mlxd.chat.parser import (
    WS_HOLD_CHARS,
    OutputParser,
    StopMatcher,
    holdback,
    merge_events,
    parse_output,
)
from mlxd.types import ChatEvent, ReasoningDelta, TextDelta, ToolCall, Warning

THINK = ("<think>", "</think>")
F_PLAIN = Formats(reasoning=None, harmony=False, tool=None)
F_THINK = Formats(reasoning=THINK, harmony=False, tool=HERMES)
F_MISTRAL = Formats(reasoning=None, harmony=False, tool=MISTRAL)
F_LLAMA = Formats(reasoning=None, harmony=False, tool=LLAMA3)
F_HARMONY = Formats(reasoning=None, harmony=True, tool=None)
F_CUSTOM = Formats(reasoning=("<<R>>", "<</R>>"), harmony=False, tool=None)

T, R = TextDelta, ReasoningDelta


def TC(n: int, name: str, args: str) -> ToolCall:  # noqa: N802
    return ToolCall(f"id{n}", name, args, n)


CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
ARGS = '{"city": "Paris"}'
H_ANALYSIS = "<|channel|>analysis<|message|>"
H_FINAL = "<|start|>assistant<|channel|>final<|message|>"
H_TOOL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
)

# (id, formats, options, output text, expected events)
CASES: list[tuple[str, Formats, dict, str, list[ChatEvent]]] = [
    ("plain", F_PLAIN, {}, "Hello world", [T("Hello world")]),
    ("lone angle brackets", F_THINK, {"tools": True}, "a < b <t c <", [T("a < b <t c <")]),
    ("partial marker at end", F_THINK, {}, "Hello <thi", [T("Hello <thi")]),
    (
        "unicode",
        F_THINK,
        {},
        "café 😀<think>日本</think>“ok”",
        [T("café 😀"), R("日本"), T("“ok”")],
    ),
    ("think", F_THINK, {}, "<think>\nhmm\nok</think>\n\nAnswer.", [R("hmm\nok"), T("Answer.")]),
    (
        "whitespace around markers is layout",
        F_THINK,
        {"tools": True},
        f"<think>\n plan \n</think>\n\n Sure. \n<tool_call>{CALL}</tool_call>\n tail \n",
        [R("plan"), T("Sure."), TC(0, "get_weather", ARGS), T("tail \n")],
    ),
    (
        "reasoning open",
        F_THINK,
        {"reasoning_open": True},
        "\nhmm</think>Answer",
        [R("hmm"), T("Answer")],
    ),
    ("reasoning cut off", F_THINK, {}, "<think>still thinking", [R("still thinking")]),
    ("no reasoning split", F_PLAIN, {}, "<think>x</think>y", [T("<think>x</think>y")]),
    ("custom markers", F_CUSTOM, {}, "<<R>>plan<</R>>done", [R("plan"), T("done")]),
    ("stop", F_PLAIN, {"stop": ["STOP"]}, "abc STOP def", [T("abc ")]),
    ("stop overlapping prefix", F_PLAIN, {"stop": ["aab"]}, "xaaab yy", [T("xa")]),
    ("stop two strings", F_PLAIN, {"stop": ["zz", "yx"]}, "ab yzyx zz", [T("ab yz")]),
    (
        "stop after reasoning",
        F_THINK,
        {"stop": ["wor"]},
        "<think>a</think>hello world",
        [R("a"), T("hello ")],
    ),
    ("stop inside reasoning", F_THINK, {"stop": ["bad"]}, "<think>a bad</think>x", [R("a ")]),
    ("stop never matched", F_PLAIN, {"stop": ["end."]}, "the end", [T("the end")]),
    (
        "hermes call",
        F_THINK,
        {"tools": True},
        f"<tool_call>\n{CALL}\n</tool_call>",
        [TC(0, "get_weather", ARGS)],
    ),
    (
        "hermes parameters key",
        F_THINK,
        {"tools": True},
        '<tool_call>{"name": "f", "parameters": {"a": [1, 2]}}</tool_call>',
        [TC(0, "f", '{"a": [1, 2]}')],
    ),
    (
        "hermes two calls",
        F_THINK,
        {"tools": True},
        f"Let me check.\n<tool_call>{CALL}</tool_call>\n<tool_call>{CALL}</tool_call>\n",
        [T("Let me check."), TC(0, "get_weather", ARGS), TC(1, "get_weather", ARGS)],
    ),
    (
        "think then call",
        F_THINK,
        {"tools": True},
        f"<think>need weather</think>\n\n<tool_call>{CALL}</tool_call>",
        [R("need weather"), TC(0, "get_weather", ARGS)],
    ),
    (
        "hermes bad json",
        F_THINK,
        {"tools": True},
        "<tool_call>{bad}</tool_call> after",
        [
            Warning(
                "could not parse a hermes tool call: tool call is not valid JSON: "
                "Expecting property name enclosed in double quotes"
            ),
            T("<tool_call>{bad}</tool_call>after"),
        ],
    ),
    (
        "hermes no name",
        F_THINK,
        {"tools": True},
        '<tool_call>{"x": 1}</tool_call>',
        [
            Warning("could not parse a hermes tool call: tool call needs a string 'name'"),
            T('<tool_call>{"x": 1}</tool_call>'),
        ],
    ),
    (
        "hermes unterminated valid",
        F_THINK,
        {"tools": True},
        f"<tool_call>{CALL}",
        [TC(0, "get_weather", ARGS)],
    ),
    (
        "hermes unterminated cut",
        F_THINK,
        {"tools": True},
        '<tool_call>{"name": "get',
        [
            Warning(
                "could not parse a hermes tool call: tool call is not valid JSON: "
                "Unterminated string starting at"
            ),
            T('<tool_call>{"name": "get'),
        ],
    ),
    (
        "tools disabled",
        F_THINK,
        {},
        f"<tool_call>{CALL}</tool_call>",
        [T(f"<tool_call>{CALL}</tool_call>")],
    ),
    (
        "mistral json list",
        F_MISTRAL,
        {"tools": True},
        '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]',
        [TC(0, "f", '{"a": 1}'), TC(1, "g", "{}")],
    ),
    (
        "mistral header",
        F_MISTRAL,
        {"tools": True},
        'Sure.[TOOL_CALLS]f[ARGS]{"a": 1}',
        [T("Sure."), TC(0, "f", '{"a": 1}')],
    ),
    (
        "mistral bad",
        F_MISTRAL,
        {"tools": True},
        "[TOOL_CALLS]nonsense",
        [
            Warning(
                "could not parse a mistral tool call: Could not parse tool call from: nonsense"
            ),
            T("[TOOL_CALLS]nonsense"),
        ],
    ),
    (
        "llama3 bare json",
        F_LLAMA,
        {"tools": True},
        ' \n{"name": "get_weather", "parameters": {"city": "Paris"}}',
        [TC(0, "get_weather", ARGS)],
    ),
    (
        "llama3 python tag",
        F_LLAMA,
        {"tools": True},
        f"<|python_tag|>{CALL}",
        [TC(0, "get_weather", ARGS)],
    ),
    ("llama3 text", F_LLAMA, {"tools": True}, " It is {sunny}.", [T(" It is {sunny}.")]),
    (
        "llama3 bad json",
        F_LLAMA,
        {"tools": True},
        '{"name": ',
        [
            Warning(
                "could not parse a llama3 tool call: tool call is not valid JSON: Expecting value"
            ),
            T('{"name": '),
        ],
    ),
    ("llama3 tools disabled", F_LLAMA, {}, CALL, [T(CALL)]),
    (
        "harmony answer",
        F_HARMONY,
        {},
        f"{H_ANALYSIS}think first<|end|>{H_FINAL}Answer.<|return|>",
        [R("think first"), T("Answer.")],
    ),
    ("harmony no markers", F_HARMONY, {}, "just text", [T("just text")]),
    (
        "harmony tool",
        F_HARMONY,
        {"tools": True},
        f"{H_ANALYSIS}need tool<|end|>{H_TOOL}{ARGS}<|call|>",
        [R("need tool"), TC(0, "get_weather", ARGS)],
    ),
    (
        "harmony tool cut at eos",
        F_HARMONY,
        {"tools": True},
        f"{H_TOOL}{ARGS}",
        [TC(0, "get_weather", ARGS)],
    ),
    (
        "harmony bad args",
        F_HARMONY,
        {"tools": True},
        f"{H_TOOL}{{oops<|call|>",
        [
            Warning(
                "could not parse a harmony tool call to get_weather: Expecting property name "
                "enclosed in double quotes: line 1 column 2 (char 1)"
            ),
            T("{oops"),
        ],
    ),
    (
        "harmony stop",
        F_HARMONY,
        {"stop": ["Ans"]},
        f"{H_ANALYSIS}x<|end|>{H_FINAL}Answer",
        [R("x")],
    ),
]


def _ids():
    counter = itertools.count()
    return lambda: f"id{next(counter)}"


def run(formats: Formats, options: dict, chunks: Sequence[str]) -> list[ChatEvent]:
    parser = OutputParser(formats, new_id=_ids(), **options)
    events: list[ChatEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return merge_events(events + parser.flush())


def _normalize(events: list[ChatEvent]) -> list[ChatEvent]:
    # JSON error messages carry positions that depend on the text; compare their prefix.
    return [
        Warning(e.message.split(": line")[0].split(" at:")[0]) if isinstance(e, Warning) else e
        for e in events
    ]


def _splits(text: str):
    yield "whole", [text]
    yield "chars", list(text)
    for i in range(1, len(text)):
        yield f"split@{i}", [text[:i], text[i:]]


@pytest.mark.parametrize(
    ("formats", "options", "text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_chat_parser_every_split_gives_expected_events(formats, options, text, expected):
    for how, chunks in _splits(text):
        got = run(formats, options, chunks)
        assert _prefix_match(got, expected), f"{how}: {got!r}"


def _prefix_match(got: list[ChatEvent], expected: list[ChatEvent]) -> bool:
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected, strict=True):
        if isinstance(e, Warning):
            if not (isinstance(g, Warning) and g.message.startswith(e.message)):
                return False
        elif g != e:
            return False
    return True


def test_chat_parser_stop_sets_stopped_and_ignores_later_text():
    parser = OutputParser(F_PLAIN, stop=["END"])
    assert parser.feed("abc E") == [T("abc ")]  # "E" may start END; no marker can follow " "
    assert not parser.stopped
    assert parser.feed("ND more") == []
    assert parser.stopped and parser.stops.matched == "END"
    assert parser.feed("even more") == []
    assert parser.flush() == []


@pytest.mark.parametrize("formats", [F_PLAIN, F_THINK, F_LLAMA], ids=["plain", "think", "llama"])
def test_chat_parser_streams_a_run_of_newlines_holding_at_most_a_few(formats: Formats) -> None:
    # An answer of 40 newline tokens arrives as it is generated, not as one chunk at the end:
    # only what could still be layout before a marker waits, WS_HOLD_CHARS at most.
    parser = OutputParser(formats, tools=True)
    sent = ""
    for i in range(1, 41):
        sent += "".join(e.text for e in parser.feed("\n") if isinstance(e, TextDelta))
        assert len(sent) >= i - WS_HOLD_CHARS
    sent += "".join(e.text for e in parser.flush() if isinstance(e, TextDelta))
    assert sent == "\n" * 40


def test_chat_parser_whitespace_before_a_marker_is_still_layout() -> None:
    parser = OutputParser(F_THINK, tools=True)
    assert parser.feed("Sure.") == [T("Sure.")]
    assert parser.feed(" \n") == []  # held: a marker may follow
    (call,) = parser.feed(f"<tool_call>{CALL}</tool_call>")  # no " \n" text before it
    assert isinstance(call, ToolCall) and (call.name, call.arguments) == ("get_weather", ARGS)


def test_chat_parser_holds_back_only_possible_marker_prefixes():
    assert holdback("Hello <th", ["<think>"]) == 3
    assert holdback("Hello <tx", ["<think>"]) == 0
    assert holdback("abc", []) == 0
    parser = OutputParser(F_THINK, stop=["STOP"])
    assert parser.feed("one S") == [T("one")]  # "S" may start STOP; " " may precede a marker
    assert parser.feed("x <") == [T(" Sx")]  # "<" may start <think>: held back
    assert parser.flush() == [T(" <")]


def test_chat_parser_tool_call_ids_are_unique_by_default():
    events = parse_output(
        f"<tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call>", F_THINK, tools=True
    )
    ids = [e.id for e in events if isinstance(e, ToolCall)]
    assert len(ids) == 2 and len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


# ---- property: any split equals the one-shot parse ---------------------------------------

_PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    CALL,
    "{bad",
    "hello",
    " ",
    "\n",
    "<",
    "</",
    "think",
    "é😀",
    "STOP",
    "ST",
    "[TOOL_CALLS]",
    "<|channel|>",
    "analysis",
    "<|message|>",
    "<|end|>",
    "final",
    "<|call|>",
    H_TOOL,
]
_FORMATS = [F_PLAIN, F_THINK, F_MISTRAL, F_LLAMA, F_HARMONY, F_CUSTOM]


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    formats=st.sampled_from(_FORMATS),
    tools=st.booleans(),
    reasoning_open=st.booleans(),
    stop=st.sampled_from([[], ["STOP"], ["</think>h"], ["\n\n", "é"]]),
)
def test_chat_parser_any_split_equals_one_shot(pieces, cuts, formats, tools, reasoning_open, stop):
    text = "".join(pieces)
    options = {"tools": tools, "reasoning_open": reasoning_open, "stop": stop}
    one_shot = run(formats, options, [text])
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert run(formats, options, chunks) == one_shot
    if formats is F_PLAIN and not stop:  # nothing to split out: the text passes unchanged
        assert "".join(e.text for e in one_shot if isinstance(e, TextDelta)) == text


@pytest.mark.parametrize(
    "pieces",
    [
        ["Yes fine. It is forty-two"],
        list("Yes fine. It is forty-two"),
        ["Yes fine. It i", "s forty-t", "wo"],
    ],
)
def test_stop_matcher_end_is_where_the_match_ends_in_all_text_fed(pieces: list[str]) -> None:
    matcher = StopMatcher(["s forty-t", "nowhere"])
    out = "".join(matcher.feed(p) for p in pieces)
    text = "".join(pieces)
    assert out == "Yes fine. It i" and matcher.matched == "s forty-t"
    assert matcher.end == text.index("s forty-t") + len("s forty-t")


SPAN_CASES = [
    (F_THINK, {}, "<think>\nplan\n</think>\n\nHi", "\nplan\n"),
    (F_THINK, {"reasoning_open": True}, "plan</think>Hi<think>more</think>", "plan|more"),
    (F_THINK, {"stop": ["ST"]}, "<think>abcSTdef</think>", "abc"),
    (F_THINK, {}, "no reasoning at all", ""),
    (
        F_HARMONY,
        {},
        "<|channel|>analysis<|message|>Need.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
        "Need.",
    ),
]


@pytest.mark.parametrize(("formats", "kwargs", "text", "reasoning"), SPAN_CASES)
def test_reasoning_spans_are_where_the_reasoning_text_lies(
    formats: Formats, kwargs: dict, text: str, reasoning: str
) -> None:
    """Whole or one character at a time: the same spans, which cut the reasoning (layout
    whitespace included, markers not) out of the text fed."""
    for pieces in ([text], list(text)):
        parser = OutputParser(formats, **kwargs)
        for piece in pieces:
            parser.feed(piece)
        parser.flush()
        assert "|".join(text[a:b] for a, b in parser.reasoning_spans) == reasoning
