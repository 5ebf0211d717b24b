"""ChatEvents -> Anthropic Messages bodies and stream events (a generation.Wire).

Content blocks follow the events in order: reasoning is a `thinking` block, answer text a
`text` block, each tool call a `tool_use` block; a change of kind starts a new block. The
stream is message_start, then per block content_block_start / _delta... / _stop, then
message_delta (stop_reason, usage) and message_stop; every event has an `event:` line.
Usage: `input_tokens` are the prompt tokens not served from the prefix cache,
`cache_read_input_tokens` the ones that were (their sum is the whole prompt, as Anthropic
counts), in message_start already once the engine has admitted the request; a `ping` follows
message_start, and comes again whenever the stream has been idle for a while.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxd.chat.json_text import loads_json
from mlxd.errors import MlxdError
from mlxd.server.error_responses import anthropic_error_body
from mlxd.server.sse import named_event
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage

if TYPE_CHECKING:  # annotations only
    from mlxd.types import ChatEvent

PING = named_event("ping", {"type": "ping"})
_STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.LOOP: "max_tokens",  # loop detection: cut before a natural end
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CANCELLED: "end_turn",
    FinishReason.ERROR: "end_turn",  # never sent: an error is an error event or status
}


def usage_body(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object `input` must be (non-object JSON is wrapped)."""
    try:
        value = loads_json(call.arguments)
    except json.JSONDecodeError:
        value = call.arguments
    return value if isinstance(value, dict) else {"arguments": value}


def stop_fields(finish: FinishEvent) -> dict[str, Any]:
    if finish.stop_string is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": finish.stop_string}
    return {"stop_reason": _STOP_REASONS[finish.reason], "stop_sequence": None}


@dataclass(slots=True)
class AnthropicWire:
    model: str
    prompt_tokens: int  # message_start's input_tokens when the opening is given no usage
    id: str = field(default_factory=lambda: "msg_" + secrets.token_hex(12))
    content: list[dict[str, Any]] = field(default_factory=list)  # non-streaming body
    open_kind: str | None = None  # streaming: the kind of the block being sent
    index: int = -1  # streaming: the index of the last block started

    def _message(self, content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }

    # ---- streaming ------------------------------------------------------------------

    def opening(self, known: Usage | None = None) -> list[bytes]:
        """message_start with the usage known (the cache split once the request is
        admitted), then a ping at once, as Anthropic's API does: the stream is alive."""
        usage = usage_body(known or Usage(self.prompt_tokens, 0, 0))
        start = {"type": "message_start", "message": self._message([], usage)}
        return [named_event("message_start", start), PING]

    def keep_alive(self) -> bytes:
        return PING

    def frames(self, ev: ChatEvent) -> list[bytes]:
        if isinstance(ev, TextDelta) and ev.text:
            delta = {"type": "text_delta", "text": ev.text}
            return self._into("text", {"type": "text", "text": ""}) + [self._delta(delta)]
        if isinstance(ev, ReasoningDelta) and ev.text:
            delta = {"type": "thinking_delta", "thinking": ev.text}
            thinking = {"type": "thinking", "thinking": "", "signature": ""}
            return self._into("thinking", thinking) + [self._delta(delta)]
        if isinstance(ev, ToolCall):
            call = {"type": "tool_use", "id": ev.id, "name": ev.name, "input": {}}
            partial = json.dumps(tool_input(ev), ensure_ascii=False)
            delta = {"type": "input_json_delta", "partial_json": partial}
            return [*self._into("tool_use", call), self._delta(delta), *self._close()]
        if isinstance(ev, FinishEvent):
            end = {"type": "message_delta", "delta": stop_fields(ev), "usage": usage_body(ev.usage)}
            stop = named_event("message_stop", {"type": "message_stop"})
            return [*self._close(), named_event("message_delta", end), stop]
        return []  # empty deltas; Warning: logged by the caller, not sent

    def closing(self) -> list[bytes]:
        return []

    def error_frames(self, err: MlxdError) -> list[bytes]:
        return [named_event("error", anthropic_error_body(err))]

    def _into(self, kind: str, block: Mapping[str, object]) -> list[bytes]:
        """Frames that make `kind` the open block (a tool_use block is never continued)."""
        if self.open_kind == kind and kind != "tool_use":
            return []
        frames = self._close()
        self.index += 1
        self.open_kind = kind
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*frames, named_event("content_block_start", start)]

    def _close(self) -> list[bytes]:
        if self.open_kind is None:
            return []
        self.open_kind = None
        stop = {"type": "content_block_stop", "index": self.index}
        return [named_event("content_block_stop", stop)]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        body = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return named_event("content_block_delta", body)

    # ---- one body -------------------------------------------------------------------

    def add(self, ev: ChatEvent) -> None:
        last = self.content[-1] if self.content else None
        if isinstance(ev, TextDelta) and ev.text:
            if last is not None and last["type"] == "text":
                last["text"] += ev.text
            else:
                self.content.append({"type": "text", "text": ev.text})
        elif isinstance(ev, ReasoningDelta) and ev.text:
            if last is not None and last["type"] == "thinking":
                last["thinking"] += ev.text
            else:
                self.content.append({"type": "thinking", "thinking": ev.text, "signature": ""})
        elif isinstance(ev, ToolCall):
            block = {"type": "tool_use", "id": ev.id, "name": ev.name, "input": tool_input(ev)}
            self.content.append(block)

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        body = self._message(self.content, usage_body(finish.usage))
        body.update(stop_fields(finish))
        return body
