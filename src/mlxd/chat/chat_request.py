"""ChatRequest: one chat request as every front door (the OpenAI, Anthropic and Responses
routes, `mlxd run` and `mlxd chat`) hands it to the chat layer's start_chat."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from mlxd.chat.options import ChatOptions
from mlxd.chat.tool_choice import ToolChoice
from mlxd.config import SAMPLING_BOUNDS, SERVER_DEFAULT_MAX_TOKENS_FRACTION

__all__ = ["ChatRequest", "MaxTokensPolicy", "Reasoning"]

# "auto": the markers detected from the tokenizer; None: no reasoning split; or the
# (start, end) markers themselves.
Reasoning = Literal["auto"] | tuple[str, str] | None


class MaxTokensPolicy(StrEnum):
    """How many tokens a request that sets no max_tokens may generate."""

    WINDOW = "window"  # what the context window leaves after the prompt (the CLI)
    HALF_WINDOW = "half_window"  # at most half the context window (the server)

    def max_tokens(self, context_window: int) -> int | None:
        """The max_tokens this policy sets (None: the engine's budget rule decides),
        within the bound every front door checks."""
        if self is MaxTokensPolicy.WINDOW:
            return None
        cap = max(1, int(context_window * SERVER_DEFAULT_MAX_TOKENS_FRACTION))
        return min(cap, int(SAMPLING_BOUNDS["max_tokens"].high))


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Messages are OpenAI-shaped (chat.messages validates them), tools OpenAI function
    tools. `template` replaces the model's chat template; `allow_image_urls` lets images be
    http(s) URLs fetched here (else data: URLs only). `continue_final`: the answer continues
    the last message, the assistant's (Anthropic's prefill), instead of starting a turn."""

    messages: list[dict[str, Any]]
    options: ChatOptions = field(default_factory=ChatOptions)
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    template_kwargs: dict[str, Any] | None = None
    reasoning: Reasoning = "auto"
    max_tokens_policy: MaxTokensPolicy = MaxTokensPolicy.WINDOW
    template: str | None = None
    allow_image_urls: bool = False
    continue_final: bool = False  # the last message is the assistant's: continue it
