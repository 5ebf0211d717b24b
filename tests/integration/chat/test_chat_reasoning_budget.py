"""The reasoning budget (max_reasoning_tokens) on a model that reasons forever: after N
reasoning tokens the engine forces the end marker and the model answers; the rest of the
batch is untouched, and a prompt that closed reasoning is answered as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta
from tests.chat_requests import chat_request
from tests.integration.chat.conftest import OPEN_THINK_TEMPLATE
from tests.integration.chat.scripted import make_scripted_checkpoint

USER = [{"role": "user", "content": "Capital of France?"}]
# "Hmm more Hmm more ..." forever: " more" is followed by "Hmm" again, never by </think>.
PONDER = ["<think>", "Hmm", " more", "</think>", "Paris", "."]
FOREVER = {" more": "Hmm"}


@pytest.fixture(scope="module")
def ponder(engine: Any, checkpoints_dir: Path) -> Any:
    path = make_scripted_checkpoint(checkpoints_dir / "ponder", PONDER, successors=FOREVER)
    return engine.load_model(path)


@pytest.fixture(scope="module")
def ponder_open(engine: Any, checkpoints_dir: Path) -> Any:
    """The template opens <think> in the generation prompt."""
    path = make_scripted_checkpoint(
        checkpoints_dir / "ponder-open", PONDER, OPEN_THINK_TEMPLATE, successors=FOREVER
    )
    return engine.load_model(path)


def answer(engine: Any, info: Any, options: dict[str, Any], **fields: Any) -> tuple[str, str, Any]:
    from mlxd.chat.session import start_chat

    events = list(start_chat(engine, info, chat_request(USER, options, **fields)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    return reasoning, text, finish


def test_without_a_budget_it_reasons_until_max_tokens(engine: Any, ponder: Any) -> None:
    reasoning, text, finish = answer(engine, ponder, {"max_tokens": 30})
    assert finish.reason is FinishReason.LENGTH and text == ""
    assert reasoning.startswith(thought(4))


@pytest.mark.parametrize("n", [0, 1, 5, 12])
def test_after_n_reasoning_tokens_the_block_closes_and_the_answer_follows(
    engine: Any, ponder: Any, n: int
) -> None:
    reasoning, text, finish = answer(engine, ponder, {"max_tokens": 60, "max_reasoning_tokens": n})
    assert (reasoning, text, finish.reason) == (thought(n), "Paris.", FinishReason.STOP)
    assert finish.usage.completion_tokens == n + 5  # <think>, N, </think>, "Paris", ".", EOS
    assert n <= finish.usage.reasoning_tokens <= n + 2  # the markers may count as reasoning


def thought(n: int) -> str:
    """The model's first n reasoning tokens as text."""
    return "".join((["Hmm", " more"] * n)[:n])


def test_a_prompt_that_opens_reasoning_is_budgeted_too(engine: Any, ponder_open: Any) -> None:
    reasoning, text, finish = answer(engine, ponder_open, {"max_reasoning_tokens": 4})
    assert (reasoning, text, finish.reason) == (thought(4), "Paris.", FinishReason.STOP)


def test_budgeted_rows_share_a_batch_with_free_ones(engine: Any, ponder: Any) -> None:
    from mlxd.chat.session import start_chat

    free = chat_request(USER, {"max_tokens": 20})
    tight = chat_request(USER, {"max_tokens": 20, "max_reasoning_tokens": 2})
    streams = [start_chat(engine, ponder, r) for r in (free, tight, free)]
    results = [list(s) for s in streams]
    texts = ["".join(e.text for e in r if isinstance(e, TextDelta)) for r in results]
    assert texts == ["", "Paris.", ""]
    assert results[0][-1].usage.completion_tokens == results[2][-1].usage.completion_tokens == 20


def test_after_a_forced_end_the_answer_is_still_constrained(engine: Any, ponder: Any) -> None:
    options = {
        "max_tokens": 24,
        "max_reasoning_tokens": 3,
        "response_format": {"type": "json_object"},
    }
    reasoning, text, _ = answer(engine, ponder, options)
    assert reasoning == thought(3)
    assert text.lstrip().startswith("{") and "Paris" not in text  # the grammar, not the script


# GPT-OSS harmony: analysis forever; the budget closes it into the final channel.
HARMONY_PONDER = ["<|channel|>", "analysis", "<|message|>", "Hmm", " more", "<|end|>", "<|start|>"]


def test_a_harmony_analysis_is_closed_into_the_final_channel(
    engine: Any, checkpoints_dir: Path
) -> None:
    path = make_scripted_checkpoint(
        checkpoints_dir / "ponder-harmony", HARMONY_PONDER, successors=FOREVER
    )
    info = engine.load_model(path)
    free = answer(engine, info, {"max_tokens": 12})
    assert free[0].startswith(thought(4)) and free[1] == ""  # all analysis, no final
    reasoning, text, _ = answer(engine, info, {"max_tokens": 24, "max_reasoning_tokens": 3})
    assert reasoning == thought(3)
    # The final channel came; the scripted model then writes its own chunks in it.
    assert text.startswith("Hmm") and "<|" not in text, text


# Gemma 4: its thought opens with two tokens (<|channel> then "thought") under its real
# template; the budget counts after both and forces its end marker <channel|>.
GEMMA4_PONDER = ["<|channel>", "thought", "Hmm", " more", "<channel|>", "Paris", "."]


def test_a_gemma4_thought_with_a_two_token_start_is_budgeted(
    engine: Any, checkpoints_dir: Path
) -> None:
    from tests.vendor_families_more import GEMMA4_SPECIAL
    from tests.vendor_templates import vendor_template

    path = make_scripted_checkpoint(
        checkpoints_dir / "ponder-gemma4",
        GEMMA4_PONDER,
        vendor_template("gemma4"),
        successors=FOREVER,
        special=GEMMA4_SPECIAL,
    )
    info = engine.load_model(path)
    thinking = {"template_kwargs": {"enable_thinking": True}}
    free = answer(engine, info, {"max_tokens": 12}, **thinking)
    assert free[0].startswith(thought(4)) and free[1] == ""
    reasoning, text, finish = answer(engine, info, {"max_reasoning_tokens": 3}, **thinking)
    assert (reasoning, text, finish.reason) == (thought(3), "Paris.", FinishReason.STOP)
