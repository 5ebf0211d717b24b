"""DRY, XTC and loop detection on a real server through the official OpenAI client (the
llama.cpp-style extension fields go in extra_body), and the same on the CLI's option table."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from .conftest import STOP_SCRIPT

PERIOD = len(STOP_SCRIPT) + 1  # the script, then EOS, again and again under ignore_eos


def answer(client: Any, **extra: Any) -> Any:
    return client.chat.completions.create(
        model="scripted-stop",
        messages=[{"role": "user", "content": "go"}],
        max_tokens=200,
        extra_body={"ignore_eos": True, **extra},
    )


def test_a_loop_ends_as_length_before_the_budget(client: Any) -> None:
    plain = answer(client)
    assert plain.choices[0].finish_reason == "length" and plain.usage.completion_tokens == 200
    looped = answer(client, loop_repeats=3)
    assert looped.choices[0].finish_reason == "length"  # what OpenAI clients know
    assert looped.usage.completion_tokens == 64  # max(3 * PERIOD, 64 tokens at least)
    assert plain.choices[0].message.content.startswith(looped.choices[0].message.content)


def test_dry_and_xtc_fields_are_honoured(client: Any) -> None:
    plain = answer(client).choices[0].message.content
    dry = answer(client, dry_multiplier=3.0, dry_sequence_breakers=[]).choices[0].message.content
    assert dry != plain and dry[: len("".join(STOP_SCRIPT))] == plain[: len("".join(STOP_SCRIPT))]
    xtc = dict(temperature=1.0, seed=5, xtc_probability=1.0, xtc_threshold=0.1)
    assert answer(client, **xtc).choices[0].message.content == plain  # one choice each: kept
    same = answer(client, repeat_last_n=32, repetition_context_size=32).choices[0].message
    assert same.content == plain


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("loop_repeats", 1),
        ("dry_base", 0.5),
        ("xtc_threshold", 0.6),
        ("dry_sequence_breakers", [""]),
    ],
)
def test_out_of_range_values_are_a_400_naming_the_field(
    client: Any, field: str, value: object
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        answer(client, **{field: value})
    assert field in str(e.value)


def test_repeat_last_n_conflicting_with_the_window_is_a_400(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        answer(client, repeat_last_n=32, repetition_context_size=16)
    assert "repeat_last_n" in str(e.value)
