"""Speculation options through the one option table: HTTP fields and CLI flags alike."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from mlxd.chat.options import ChatOptions, sampling_params
from mlxd.cli.repl_options import add_generation_flags, chat_options_from_args
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind, SamplingParams


def resolve(
    raw: dict[Any, Any], model_defaults: dict[str, object] | None = None, **kw: Any
) -> SamplingParams:
    """Raw options (as a front door gets them) through ChatOptions into SamplingParams."""
    return sampling_params(ChatOptions.parse(raw), model_defaults, **kw)


def test_draft_options_resolve_into_sampling_params() -> None:
    p = resolve({"draft_kind": "ngram", "num_draft_tokens": 3})
    assert p.draft_kind is DraftKind.NGRAM and p.num_draft_tokens == 3
    unset = resolve({})
    assert unset.draft_kind is None and unset.num_draft_tokens is None


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"draft_kind": "eagle"}, "draft_kind"),
        ({"draft_kind": 1}, "draft_kind"),
        ({"num_draft_tokens": 0}, "num_draft_tokens"),
        ({"num_draft_tokens": 17}, "num_draft_tokens"),
        ({"num_draft_tokens": 2.5}, "num_draft_tokens"),
    ],
)
def test_bad_draft_options_name_their_field(options: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        resolve(options)
    assert exc.value.param == param


def test_cli_flags_map_onto_the_same_fields() -> None:
    parser = argparse.ArgumentParser()
    add_generation_flags(parser)
    args = parser.parse_args(["--draft-kind", "ngram", "--num-draft-tokens", "5"])
    expected = ChatOptions(draft_kind=DraftKind.NGRAM, num_draft_tokens=5)
    assert chat_options_from_args(args) == expected
    with pytest.raises(InvalidRequest, match="num_draft_tokens"):
        chat_options_from_args(parser.parse_args(["--num-draft-tokens", "99"]))
