"""REPL input without a terminal: triple-quote fences and end of input."""

from __future__ import annotations

import io

import pytest

from mlxd.cli.repl_input import PipeReader, read_message


def messages(text: str) -> list[str]:
    reader = PipeReader(io.StringIO(text))
    out = []
    while (m := reader.read()) is not None:
        out.append(m)
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello\nworld\n", ["hello", "world"]),
        ('"""\nline one\nline two\n"""\nnext\n', ["line one\nline two", "next"]),
        ('"""first\nsecond"""\n', ["first\nsecond"]),
        ('"""one line"""\n', ["one line"]),
        ('"""\nunterminated\n', ["unterminated"]),
        ("", []),
        ("no newline at end", ["no newline at end"]),
    ],
)
def test_fences_and_lines(text: str, expected: list[str]) -> None:
    assert messages(text) == expected


def test_prompts_used_for_each_line() -> None:
    seen: list[str] = []
    lines = iter(['"""', "a", '"""'])

    def read_line(prompt: str) -> str | None:
        seen.append(prompt)
        return next(lines, None)

    assert read_message(read_line) == "a"
    assert seen == [">>> ", "... ", "... "]
