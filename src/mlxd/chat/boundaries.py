"""Where a chat prompt's parts end, in tokens (`PromptBoundaries`): the engine snapshots its
prefix cache there, so that a later prompt sharing a part skips it (docs/prefix-cache.md).

Each boundary is the common token prefix of the prompt and another rendering by the same
template (mlx-lm's server finds its system segment the same way):

  system     the system messages, then an empty user message
  history    every message but the last, without a generation prompt
  next_turn  the messages, a reply and a new user message: the prompt of a next turn. A
             template that opens <think> in its generation prompt but drops reasoning from
             history departs before the <think>; ChatML departs nowhere (the whole prompt).

A rendering the template refuses leaves that boundary at 0 (no snapshot there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxd.chat.messages import normalize_messages
from mlxd.types import PromptBoundaries

__all__ = ["prompt_boundaries"]

# A probe reply and user message: plain words that merge with no template text around them.
_PROBE = normalize_messages(
    [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Thanks."}]
)

Render = Callable[[list[dict[str, Any]], bool], list[int]]  # (messages, generation prompt)


def prompt_boundaries(
    messages: list[dict[str, Any]], prompt_ids: list[int], render: Render
) -> PromptBoundaries:
    """`render(messages, add_generation_prompt)` tokenizes another conversation exactly as the
    prompt was (same template, tools, kwargs and control-token handling)."""
    systems = 0
    while systems < len(messages) and messages[systems]["role"] in ("system", "developer"):
        systems += 1
    system = 0
    if systems:
        empty_user = normalize_messages([{"role": "user", "content": ""}])
        system = _shared(prompt_ids, render, messages[:systems] + empty_user, False)
    history = _shared(prompt_ids, render, messages[:-1], False) if len(messages) > 1 else 0
    next_turn = _shared(prompt_ids, render, messages + _PROBE, True)
    return PromptBoundaries(system=system, history=history, next_turn=next_turn)


def _shared(
    prompt_ids: list[int], render: Render, messages: list[dict[str, Any]], generation: bool
) -> int:
    try:
        other = render(messages, generation)
    except Exception:  # the template refuses this conversation: no boundary here
        return 0
    n = 0
    for a, b in zip(prompt_ids, other, strict=False):
        if a != b:
            break
        n += 1
    return n
