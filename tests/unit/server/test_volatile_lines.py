"""Volatile lines at the top of a prompt (Claude Code's billing header) are dropped; nothing
else is touched."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.server.volatile_lines import without_volatile_lines

HEADER = "x-anthropic-billing-header: cc_version=2.1.332.1c9; cc_entrypoint=sdk-cli;"
CCH = "x-anthropic-billing-header: cc_version=2.1.100.7b4; cc_entrypoint=cli; cch=eb6c6;"
USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("header", [HEADER, CCH])
def test_header_line_is_dropped_from_a_system_string(header: str) -> None:
    messages = [{"role": "system", "content": f"{header}\nYou are Claude Code."}, USER]
    assert without_volatile_lines(messages) == [
        {"role": "system", "content": "You are Claude Code."},
        USER,
    ]


def test_two_headers_give_the_same_messages() -> None:
    other = HEADER.replace("1c9", "dcb")
    a = [{"role": "system", "content": f"{HEADER}\nRules."}, USER]
    b = [{"role": "system", "content": f"{other}\nRules."}, USER]
    assert without_volatile_lines(a) == without_volatile_lines(b)


def test_a_system_of_the_header_alone_is_dropped() -> None:
    assert without_volatile_lines([{"role": "system", "content": HEADER}, USER]) == [USER]


def test_text_parts() -> None:
    parts: list[Any] = [{"type": "text", "text": HEADER}, {"type": "text", "text": "Rules."}]
    messages = [{"role": "system", "content": parts}, USER]
    assert without_volatile_lines(messages) == [
        {"role": "system", "content": [{"type": "text", "text": "Rules."}]},
        USER,
    ]
    assert parts[0]["text"] == HEADER  # the request's own messages are not changed


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": f"{HEADER}\nhi"}],  # a user's text is theirs
        [{"role": "system", "content": f"Rules.\n{HEADER}"}, USER],  # not at the top
        [{"role": "system", "content": "x-anthropic-billing-headers are fun"}, USER],
        [],
    ],
)
def test_anything_else_is_kept(messages: list[dict[str, Any]]) -> None:
    assert without_volatile_lines(messages) is messages
