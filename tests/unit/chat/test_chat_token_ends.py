"""TokenEnds: text positions to token counts (stop strings' usage, reasoning tokens)."""

from __future__ import annotations

import pytest

from mlxd.chat.filter import TokenEnds

# Token texts: "<think>", "ab", "" (half a character), "c", "</think>", "Hi"
LENGTHS = [7, 2, 0, 1, 8, 2]


def ends(lengths: list[int]) -> TokenEnds:
    out = TokenEnds()
    for n in lengths:
        out.add(n)
    return out


@pytest.mark.parametrize(
    ("end", "tokens"), [(1, 1), (7, 1), (8, 2), (9, 2), (10, 4), (18, 5), (20, 6), (99, 6)]
)
def test_tokens_to_counts_up_to_the_token_that_reaches_the_end(end: int, tokens: int) -> None:
    assert ends(LENGTHS).tokens_to(end) == tokens


def test_tokens_to_without_an_end_is_every_token() -> None:
    assert ends(LENGTHS).tokens_to(None) == len(LENGTHS)


@pytest.mark.parametrize(
    ("spans", "tokens"),
    [
        ([(7, 10)], 3),  # "ab", the empty token, "c"
        ([(7, 9)], 1),  # an empty token at a span's end belongs after it
        ([(0, 7), (18, 20)], 2),
        ([(8, 9)], 0),  # inside a token's text: no whole token
        ([(8, 10)], 2),  # "ab" reaches out of it: the empty token and "c"
        ([], 0),
    ],
)
def test_tokens_within_counts_whole_tokens_inside_the_spans(
    spans: list[tuple[int, int]], tokens: int
) -> None:
    assert ends(LENGTHS).tokens_within(spans) == tokens
