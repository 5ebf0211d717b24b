"""`mlxd serve --alias NAME=MODEL`: parsed at start (a bad one is refused with the flag
named), matched in order with globs (tests/e2e/server/test_anthropic.py serves them)."""

from __future__ import annotations

import pytest

from mlxd.errors import InvalidRequest
from mlxd.server.served_models import ServedModels, parse_aliases


def test_aliases_parse_in_order() -> None:
    assert parse_aliases(["claude-haiku-* = small", "claude-*=default"]) == (
        ("claude-haiku-*", "small"),
        ("claude-*", "default"),
    )
    assert parse_aliases([]) == ()


@pytest.mark.parametrize("value", ["claude-*", "=default", "claude-*=", "x=/etc/model", "x=../m"])
def test_bad_aliases_are_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_aliases([value])
    assert info.value.param == "alias" and str(info.value).startswith(f"--alias {value!r}: ")


def test_the_first_matching_pattern_wins() -> None:
    aliases = parse_aliases(["claude-haiku-*=small", "claude-*=default", "gpt-4o=big"])
    models = ServedModels(engine=None, default=None, aliases=aliases)  # type: ignore[arg-type]
    assert [models.aliased(n) for n in ("claude-haiku-4-5", "claude-sonnet-4-6", "gpt-4o")] == [
        "small",
        "default",
        "big",
    ]
    assert models.aliased("gpt-4o-mini") == "gpt-4o-mini"  # no pattern matches: as sent
    assert models.aliased("Claude-x") == "Claude-x"  # case counts
