"""Where a chat prompt's parts end, in tokens (`PromptBoundaries`): the engine snapshots its
prefix cache there, so that a later prompt sharing a part skips it (docs/prefix-cache.md).

Each boundary is where the prompt and another rendering by the same template part (mlx-lm's
server finds its system segment the same way):

  system     the system messages, then an empty user message
  history    every message but the last, without a generation prompt
  next_turn  the messages, a reply and a new user message: the prompt of a next turn. A
             template that opens <think> in its generation prompt but drops reasoning from
             history departs before the <think>; ChatML departs nowhere (the whole prompt).

The renderings are compared as text; only the stretch between the last added token (which a
tokenizer always splits at) before the parting point and the next one is tokenized, so the
cost is that of the renderings, not of tokenizing the conversation three more times. A
boundary is only where a snapshot is taken: an approximate one costs reuse, never correctness.
A rendering the template refuses leaves that boundary at 0 (no snapshot there).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Any

from mlxd.chat.messages import normalize_messages
from mlxd.types import PromptBoundaries, common_prefix_len

__all__ = ["PromptText", "prompt_boundaries"]

# A probe reply and user message: plain words that merge with no template text around them.
_PROBE = normalize_messages(
    [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Thanks."}]
)

Render = Callable[[list[dict[str, Any]], bool], str]  # (messages, generation prompt) -> text


class PromptText:
    """A rendered prompt, its token ids, and how many of them a text sharing a prefix with it
    shares. `added` matches the tokenizer's added tokens and `added_ids` are their ids (None:
    tokenize whole renderings); `encode(text, at_start)` tokenizes a stretch of text as the
    prompt was (`at_start`: from its beginning, where a BOS may be added)."""

    def __init__(
        self,
        text: str,
        ids: list[int],
        encode: Callable[[str, bool], list[int]],
        added: re.Pattern[str] | None,
        added_ids: frozenset[int],
    ) -> None:
        self.text, self.ids, self.encode = text, ids, encode
        self.added = added
        # Each added token in the text, paired with the id after it: the text before it
        # always tokenizes to the ids before it.
        self._ends: list[int] = []
        self._after: list[int] = []
        if added is not None:
            positions = [i + 1 for i, t in enumerate(ids) if t in added_ids]
            ends = [m.end() for m in added.finditer(text)]
            if len(ends) == len(positions):
                self._ends, self._after = ends, positions
            else:  # lstrip/rstrip tokens, or a text that is not what `ids` came from
                self.added = None

    def shared(self, other: str) -> int:
        """Prompt tokens that tokenizing `other` would give alike."""
        chars = common_prefix_len(self.text, other)
        if chars == len(self.text):
            return len(self.ids)  # `other` continues the prompt (a merge at its end aside)
        start_char = start_id = 0
        if self.added is not None:
            k = bisect.bisect_right(self._ends, chars)
            if k:
                start_char, start_id = self._ends[k - 1], self._after[k - 1]
            stop = self.added.search(other, chars)
            other = other[: stop.start() if stop else len(other)]
        tokens = self.encode(other[start_char:], start_char == 0)
        return start_id + common_prefix_len(self.ids[start_id:], tokens)


def prompt_boundaries(
    messages: list[dict[str, Any]], prompt: PromptText, render: Render
) -> PromptBoundaries:
    """`render(messages, add_generation_prompt)` renders another conversation exactly as the
    prompt was (same template, tools and kwargs)."""
    systems = 0
    while systems < len(messages) and messages[systems]["role"] in ("system", "developer"):
        systems += 1
    system = 0
    if systems:
        empty_user = normalize_messages([{"role": "user", "content": ""}])
        system = _shared(prompt, render, messages[:systems] + empty_user, False)
    history = _shared(prompt, render, messages[:-1], False) if len(messages) > 1 else 0
    next_turn = _shared(prompt, render, messages + _PROBE, True)
    return PromptBoundaries(system=system, history=history, next_turn=next_turn)


def _shared(
    prompt: PromptText, render: Render, messages: list[dict[str, Any]], generation: bool
) -> int:
    try:
        other = render(messages, generation)
    except Exception:  # the template refuses this conversation: no boundary here
        return 0
    return prompt.shared(other)
