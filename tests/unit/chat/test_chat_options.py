"""The one option table: defaults, model defaults, strict validation."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest

from mlxd.chat.options import OPTIONS, ChatOptions, sampling_params
from mlxd.config import SAMPLING_DEFAULTS
from mlxd.errors import InvalidRequest
from mlxd.types import SamplingParams


def resolve(
    raw: dict[Any, Any], model_defaults: dict[str, object] | None = None, **kw: Any
) -> SamplingParams:
    """Raw options (as a front door gets them) through ChatOptions into SamplingParams."""
    return sampling_params(ChatOptions.parse(raw), model_defaults, **kw)


def test_chat_options_table_covers_every_sampling_field():
    targets = {o.target for o in OPTIONS.values() if o.target}
    fields = set(SamplingParams.__slots__) - {"stop_token_ids"}  # set by the engine, not users
    assert targets == fields
    named = [o for o in OPTIONS.values() if o.name != "response_format"]
    assert all(o.cli_flag == "--" + o.name.replace("_", "-") for o in named)
    # The one option whose flags say what they ask for instead of naming the HTTP field.
    fmt = OPTIONS["response_format"]
    assert (fmt.cli_flag, fmt.cli_switch) == (
        "--json-schema",
        ("--json-mode", {"type": "json_object"}),
    )
    assert all(o.help for o in OPTIONS.values())


def test_chat_options_defaults_come_from_config():
    params = resolve({})
    for name, value in SAMPLING_DEFAULTS.items():
        assert getattr(params, name) == value
    assert params.max_tokens is None and params.seed is None


def test_chat_options_model_defaults_then_request_override():
    model = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "do_sample": True, "junk": 1}
    params = resolve({}, model)
    assert (params.temperature, params.top_p, params.top_k) == (0.6, 0.95, 20)
    params = resolve({"temperature": 0.1, "top_k": None}, model)
    assert (params.temperature, params.top_k) == (0.1, 20)  # None means "not given"


def test_chat_options_do_sample_false_means_greedy():
    assert resolve({}, {"temperature": 0.7, "do_sample": False}).temperature == 0.0


def test_chat_options_out_of_range_model_default_is_ignored():
    assert resolve({}, {"temperature": 9.0}).temperature == SAMPLING_DEFAULTS["temperature"]


def test_chat_options_full_request():
    params = resolve(
        {
            "temperature": 1,
            "top_p": 0.5,
            "top_k": 40,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "repetition_context_size": 64,
            "presence_penalty": -1.5,
            "frequency_penalty": 2,
            "seed": 7,
            "max_tokens": 16.0,
            "logit_bias": {"5": -100, 3: 2.5},
            "logprobs": True,
            "top_logprobs": 3,
            "ignore_eos": True,
            "stop": ["a", "b"],
        },
        vocab_size=10,
    )
    assert params == SamplingParams(
        temperature=1.0,
        top_p=0.5,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        repetition_context_size=64,
        presence_penalty=-1.5,
        frequency_penalty=2.0,
        logit_bias=((3, 2.5), (5, -100.0)),
        seed=7,
        max_tokens=16,
        logprobs=True,
        top_logprobs=3,
        ignore_eos=True,
    )


BAD = [
    ("temperature", math.nan, "finite"),
    ("temperature", math.inf, "finite"),
    ("temperature", True, "number"),
    ("temperature", "0.5", "number"),
    ("temperature", -0.1, ">= 0"),
    ("temperature", 2.5, "<= 2"),
    ("top_p", 1.5, "<= 1"),
    ("top_k", 1.5, "integer"),
    ("top_k", -1, ">= 0"),
    ("max_tokens", 0, ">= 1"),
    ("max_tokens", 10**9, "<="),
    ("max_tokens", False, "integer"),
    ("seed", -1, ">= 0"),
    ("repetition_penalty", 0, ">="),
    ("presence_penalty", 3, "<= 2"),
    ("logprobs", 1, "true or false"),
    ("top_logprobs", 21, "<= 20"),
    ("logit_bias", {"x": 1}, "not a token id"),
    ("logit_bias", {"5": 101}, "<= 100"),
    ("logit_bias", {"99": 1}, "not a token id"),  # beyond the vocabulary
    ("logit_bias", [1, 2], "object"),
    ("logit_bias", {str(i): 1 for i in range(1025)}, "more than 1024"),
    ("stop", 5, "string or a list"),
    ("stop", [""], "empty"),
    ("stop", ["x" * 257], "at most 256"),
    ("stop", [str(i) for i in range(17)], "at most 16"),
    ("nonsense", 1, "unknown option"),
]


@pytest.mark.parametrize(
    ("name", "value", "why"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_chat_options_reject_bad_values_naming_the_field(name, value, why):
    with pytest.raises(InvalidRequest) as info:
        resolve({name: value}, vocab_size=50)
    assert info.value.param == name
    assert why in info.value.message


def test_chat_options_stop_strings():
    assert ChatOptions.parse({}).stop == ()
    assert ChatOptions.parse({"stop": None}).stop == ()
    assert ChatOptions.parse({"stop": "END"}).stop == ("END",)
    assert ChatOptions.parse({"stop": ["a", "b", "a"]}).stop == ("a", "b")
    assert "stop" not in SamplingParams.__slots__


def test_chat_options_are_typed_and_go_back_on_the_wire_as_they_came():
    raw = {"temperature": 1, "logit_bias": {"5": -100}, "stop": "x", "draft_kind": "ngram"}
    options = ChatOptions.parse(raw)
    assert options.temperature == 1.0 and options.logit_bias == ((5, -100.0),)
    assert options.wire() == {
        "temperature": 1.0,
        "logit_bias": {"5": -100.0},
        "stop": ["x"],
        "draft_kind": "ngram",
    }
    assert ChatOptions.parse(options.wire()) == options
    assert {f.name for f in fields(ChatOptions)} == set(OPTIONS)


def test_chat_options_top_logprobs_implies_logprobs():
    assert resolve({"top_logprobs": 2}).logprobs is True
