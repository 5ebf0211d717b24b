"""DRY, XTC, repeat_last_n and loop detection through the one option table: names, lists,
defaults from generation_config, and the CLI flags generated from it."""

from __future__ import annotations

import argparse

import pytest

from mlxd.chat.options import ChatOptions, sampling_params
from mlxd.cli.repl_options import add_generation_flags, chat_options_from_args
from mlxd.config import DRY_SEQUENCE_BREAKERS
from mlxd.errors import InvalidRequest


def test_repeat_last_n_is_the_repetition_window() -> None:
    params = sampling_params(ChatOptions.parse({"repeat_last_n": 64}))
    assert params.repetition_context_size == 64
    same = ChatOptions.parse({"repeat_last_n": 64, "repetition_context_size": 64})
    assert sampling_params(same).repetition_context_size == 64
    with pytest.raises(InvalidRequest) as e:
        ChatOptions.parse({"repeat_last_n": 64, "repetition_context_size": 32})
    assert e.value.param == "repeat_last_n"


def test_dry_and_xtc_resolve_with_llama_cpp_defaults() -> None:
    plain = sampling_params(ChatOptions())
    assert not plain.dry and plain.xtc_probability == 0.0 and plain.loop_repeats is None
    assert plain.dry_sequence_breakers == DRY_SEQUENCE_BREAKERS
    params = sampling_params(
        ChatOptions.parse(
            {"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n", "\n", "|"], "loop_repeats": 4}
        )
    )
    assert params.dry and params.dry_base == 1.75 and params.dry_allowed_length == 2
    assert params.dry_sequence_breakers == ("\n", "|")  # duplicates dropped
    assert params.loop_repeats == 4


@pytest.mark.parametrize("breakers", ["\n", [], [""], ["x" * 33], [1], ["a"] * 17], ids=repr)
def test_bad_breakers_are_refused(breakers: object) -> None:
    if breakers == []:
        assert ChatOptions.parse({"dry_sequence_breakers": breakers}).dry_sequence_breakers == ()
        return
    with pytest.raises(InvalidRequest) as e:
        ChatOptions.parse({"dry_sequence_breakers": breakers})
    assert e.value.param == "dry_sequence_breakers"


def test_a_generation_config_may_turn_dry_and_xtc_on() -> None:
    config = {"dry_multiplier": 0.5, "xtc_probability": 0.3, "xtc_threshold": 0.2}
    params = sampling_params(ChatOptions(), config)
    assert (params.dry_multiplier, params.xtc_probability, params.xtc_threshold) == (0.5, 0.3, 0.2)
    greedy = sampling_params(ChatOptions(), config | {"do_sample": False})
    assert greedy.xtc_probability == 0.0 and greedy.dry_multiplier == 0.5  # DRY is no sampling
    off = sampling_params(ChatOptions.parse({"dry_multiplier": 0.0}), config)
    assert off.dry_multiplier == 0.0  # the request wins


def test_cli_flags_carry_the_same_names() -> None:
    parser = argparse.ArgumentParser()
    add_generation_flags(parser)
    args = parser.parse_args(
        [
            *("--dry-multiplier", "0.8", "--dry-sequence-breakers", "\n"),
            *("--dry-sequence-breakers", "|", "--xtc-probability", "0.5"),
            *("--repeat-last-n", "32", "--loop-repeats", "3"),
        ]
    )
    options = chat_options_from_args(args)
    assert options.wire() == {
        "dry_multiplier": 0.8,
        "dry_sequence_breakers": ["\n", "|"],
        "xtc_probability": 0.5,
        "repeat_last_n": 32,
        "loop_repeats": 3,
    }


def test_reasoning_efforts_map_onto_the_template_switches() -> None:
    from mlxd.chat.messages import effort_template_kwargs

    off = {"reasoning_effort": "low", "enable_thinking": False, "thinking": False}
    assert effort_template_kwargs("none") == off
    assert effort_template_kwargs("minimal")["enable_thinking"] is False
    assert effort_template_kwargs("medium") == {
        "reasoning_effort": "medium",
        "enable_thinking": True,
        "thinking": True,
    }
    assert effort_template_kwargs("xhigh")["reasoning_effort"] == "high"
    with pytest.raises(InvalidRequest):
        effort_template_kwargs("max")
