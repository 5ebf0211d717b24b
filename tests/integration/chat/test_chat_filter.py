"""StreamFilter on a real byte-level BPE tokenizer: token-at-a-time equals the one-shot parse."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlxd.chat.filter import StreamFilter
from mlxd.chat.formats import detect_formats
from mlxd.chat.parser import merge_events, parse_output
from mlxd.types import (
    FinishEvent,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    Timings,
    TokenLogprob,
    ToolCall,
    Usage,
    Warning,
)
from tests.integration.chat.conftest import CALL

OUTPUTS = [
    "Unicode: café naïve 日本語 😀 — “quotes”.",
    "<think>\nThe user wants weather.\n</think>\n\nLet me check.<tool_call>\n"
    + CALL
    + "\n</tool_call>",
    "Hello <thi not a marker </tool_call> <tool_call>{broken</tool_call> end",
    "😀😀<think>日本</think>語",
]
DONE = FinishEvent(FinishReason.STOP, Usage(3, 4))


def _drive(tok, ids, chunk, **kwargs):
    f = StreamFilter(tok, **kwargs)
    events = []
    for i in range(0, len(ids), chunk):
        events += f.feed(ids[i : i + chunk])
    events += f.finish(DONE)
    return _strip_ids(merge_events(events[:-1])), events[-1]


def _strip_ids(events):
    return [
        ToolCall("x", e.name, e.arguments, e.index) if isinstance(e, ToolCall) else e
        for e in events
    ]


@pytest.mark.parametrize("text", OUTPUTS)
def test_chat_filter_token_streams_equal_one_shot_parse(chat_tokenizer, text):
    ids = chat_tokenizer.encode(text, add_special_tokens=False)
    assert chat_tokenizer.decode(ids) == text  # the case is a real round trip
    formats = detect_formats(chat_tokenizer)
    expected = _strip_ids(parse_output(text, formats, tools=True))
    for chunk in (1, 2, 3, len(ids)):
        events, finish = _drive(chat_tokenizer, ids, chunk, tools=True)
        assert events == expected, chunk
        for ev in events:  # mlx-lm's detokenizer never splits a UTF-8 character
            assert "\ufffd" not in getattr(ev, "text", "")


def test_chat_filter_detects_think_and_hermes_from_vocab_and_template(
    chat_tokenizer, base_tokenizer
):
    formats = detect_formats(chat_tokenizer)
    assert formats.reasoning == ("<think>", "</think>")
    assert formats.tool is not None and formats.tool.name == "hermes"
    assert not formats.harmony
    # The base model's vocabulary has the same special tokens but no template.
    assert detect_formats(base_tokenizer).tool is not None
    assert detect_formats(chat_tokenizer, reasoning=None).reasoning is None
    assert detect_formats(chat_tokenizer, reasoning=("[a]", "[/a]")).reasoning == ("[a]", "[/a]")


def test_chat_filter_finish_reasons(chat_tokenizer):
    call = chat_tokenizer.encode(f"<tool_call>{CALL}</tool_call>", add_special_tokens=False)
    events, finish = _drive(chat_tokenizer, call, 1, tools=True)
    assert finish.reason == FinishReason.TOOL_CALLS and finish.usage == Usage(3, 4)
    assert [type(e) for e in events] == [ToolCall]
    events, finish = _drive(chat_tokenizer, call, 1, tools=False)
    assert finish.reason == FinishReason.STOP and isinstance(events[0], TextDelta)

    f = StreamFilter(chat_tokenizer, stop=["France is"])
    ids = chat_tokenizer.encode("The capital of France is Paris.", add_special_tokens=False)
    events = []
    for t in ids:
        events += f.feed([t])
        if f.stopped:
            break
    assert f.stopped
    assert f.feed(ids) == []  # later tokens are ignored
    events += f.finish(FinishEvent(FinishReason.CANCELLED, Usage(1, len(ids))))
    assert "".join(e.text for e in events[:-1]) == "The capital of "
    assert events[-1].reason == FinishReason.STOP
    assert events[-1].stop_string == "France is"  # which stop string ended it

    f = StreamFilter(chat_tokenizer, stop=["never said"])
    length = f.finish(FinishEvent(FinishReason.LENGTH, Usage()))
    assert [e.reason for e in length] == [FinishReason.LENGTH]
    assert length[-1].stop_string is None
    assert f.finish(DONE) == []  # exactly one FinishEvent


def test_chat_filter_passes_the_engine_finish_on_with_its_chat_reason(chat_tokenizer):
    failed = FinishEvent(FinishReason.ERROR, Usage(2, 1, 1), Timings(0.1, 0.2, 0.3), "x", "c")
    assert StreamFilter(chat_tokenizer).finish(failed) == [failed]
    ids = chat_tokenizer.encode("<tool_call>\n" + CALL + "\n</tool_call>", add_special_tokens=False)
    f = StreamFilter(chat_tokenizer, tools=True)
    f.feed(ids)
    finish = f.finish(replace(failed, reason=FinishReason.STOP))[-1]
    assert finish == replace(failed, reason=FinishReason.TOOL_CALLS)


def test_chat_filter_skips_eos_and_attaches_logprobs_to_text(chat_tokenizer):
    eos = next(iter(chat_tokenizer.eos_token_ids))
    think = chat_tokenizer.encode("<think>hm</think>", add_special_tokens=False)
    text = chat_tokenizer.encode("Paris", add_special_tokens=False)
    lps = [TokenLogprob(t, -0.5) for t in [*think, *text]]
    f = StreamFilter(chat_tokenizer)
    events = f.feed(think, lps[: len(think)])
    events += f.feed(text, lps[len(think) :])
    events += f.feed([eos], [TokenLogprob(eos, -0.1)])
    events += f.finish(DONE)
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    answer = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(e.text for e in reasoning) == "hm"
    assert "".join(e.text for e in answer) == "Paris"
    attached = [lp.token_id for e in answer for lp in e.logprobs]
    assert attached[-len(text) :] == text or attached[-len(text) - 1 : -1] == text
    assert not set(attached) & set(think[:-1])  # reasoning tokens' logprobs are not answer's


def _wrapped(tiny_chat_model, module_name):
    """The tiny tokenizer wrapped as mlx-lm wraps a model whose template it recognizes."""
    import importlib

    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, TokenizerWrapper
    from transformers import AutoTokenizer

    module = importlib.import_module(f"mlx_lm.tool_parsers.{module_name}")
    return TokenizerWrapper(
        AutoTokenizer.from_pretrained(tiny_chat_model),
        BPEStreamingDetokenizer,
        tool_call_start=module.tool_call_start,
        tool_call_end=module.tool_call_end,
        tool_parser=module.parse_tool_call,
    )


def test_chat_filter_reuses_mlx_lm_tool_parsers(tiny_chat_model):
    tok = _wrapped(tiny_chat_model, "pythonic")
    text = 'Checking.<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
    ids = tok.encode(text, add_special_tokens=False)
    events, finish = _drive(tok, ids, 1, tools=True)
    assert events == [TextDelta("Checking."), ToolCall("x", "get_weather", '{"city": "Paris"}', 0)]
    assert finish.reason == FinishReason.TOOL_CALLS
    bad = tok.encode("<|tool_call_start|>nonsense<|tool_call_end|>", add_special_tokens=False)
    events, finish = _drive(tok, bad, 1, tools=True)
    assert [type(e) for e in events] == [Warning, TextDelta]
    assert events[0].message.startswith("could not parse a pythonic tool call")
    assert events[1].text == "<|tool_call_start|>nonsense<|tool_call_end|>"
    assert finish.reason == FinishReason.STOP


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 100])
def test_chat_filter_stops_and_skips_eos_in_any_token_grouping(chat_tokenizer, chunk):
    # Tokens without logprobs reach the parser as one text per feed: a stop string and an EOS
    # inside a feed behave as they do token by token.
    eos = next(iter(chat_tokenizer.eos_token_ids))
    ids = chat_tokenizer.encode("The capital of France is Paris.", add_special_tokens=False)
    ids = ids[:2] + [eos] + ids[2:]
    f = StreamFilter(chat_tokenizer, stop=["France is"])
    events = []
    for i in range(0, len(ids), chunk):
        events += f.feed(ids[i : i + chunk])
    events += f.finish(DONE)
    assert "".join(e.text for e in events[:-1]) == "The capital of "
    assert events[-1].stop_string == "France is"
