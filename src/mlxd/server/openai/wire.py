"""ChatEvents -> OpenAI response bodies and stream chunks (chat and legacy completions).

One object per request: `chunks(event)` gives the SSE chunks for an event (streaming) and
`add(event)` + `response()` build the whole body (non-streaming). OpenAIFrames frames the
chunks as `data:` lines ending in `data: [DONE]` (generation.Wire).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from mlxd.errors import MlxdError
from mlxd.server.error_responses import error_body
from mlxd.server.logprobs import (
    CompletionLogprobs,
    TokenTexts,
    chat_logprobs,
    completion_logprobs,
    merge_completion_logprobs,
)
from mlxd.server.sse import COMMENT_KEEP_ALIVE, DONE, event
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage

if TYPE_CHECKING:  # annotations only
    from mlxd.types import ChatEvent

_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.LOOP: "length",  # loop detection: cut before a natural end, as "length" is
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CANCELLED: "stop",
    FinishReason.ERROR: "stop",
}


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def tool_call_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "index": call.index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


class OpenAIFrames:
    """OpenAI's SSE framing of a wire's chunks: `data: {chunk}` lines, then `data: [DONE]`;
    and the envelope every chunk and body of both APIs shares."""

    __slots__ = ()
    chunk_object: ClassVar[str]  # a streamed chunk's "object"
    body_object: ClassVar[str]  # the one body's "object"
    # Fields of each wire (its dataclass).
    id: str
    created: int
    model: str
    include_usage: bool

    def first_chunk(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def chunks(self, ev: ChatEvent) -> list[dict[str, Any]]:
        raise NotImplementedError

    def opening(self, known: Usage | None = None) -> list[bytes]:
        first = self.first_chunk()
        return [] if first is None else [event(first)]

    def keep_alive(self) -> bytes:
        return COMMENT_KEEP_ALIVE

    def frames(self, ev: ChatEvent) -> list[bytes]:
        return [event(chunk) for chunk in self.chunks(ev)]

    def closing(self) -> list[bytes]:
        return [DONE]

    def error_frames(self, err: MlxdError) -> list[bytes]:
        return [event(error_body(err)), DONE]

    def _envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _streamed(self, choice: dict[str, Any]) -> dict[str, Any]:
        """One chunk; `usage` is null in each when the client asked for a usage chunk."""
        body = self._envelope(self.chunk_object, [choice])
        if self.include_usage:
            body["usage"] = None
        return body

    def _last(self, finish: dict[str, Any], usage: Usage) -> list[dict[str, Any]]:
        """The finish chunk, then the usage-only chunk when the client asked for it."""
        out = [finish]
        if self.include_usage:
            out.append(self._envelope(self.chunk_object, []) | {"usage": usage_dict(usage)})
        return out

    def _body(self, choice: dict[str, Any], usage: Usage) -> dict[str, Any]:
        return self._envelope(self.body_object, [choice]) | {"usage": usage_dict(usage)}


@dataclass(slots=True)
class ChatWire(OpenAIFrames):
    model: str
    texts: TokenTexts | None = None  # set when logprobs were asked for
    include_usage: bool = False
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)

    chunk_object: ClassVar[str] = "chat.completion.chunk"
    body_object: ClassVar[str] = "chat.completion"

    def _chunk(self, delta: dict[str, Any], **choice: object) -> dict[str, Any]:
        fields = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self._streamed(fields | choice)

    def first_chunk(self) -> dict[str, Any]:
        return self._chunk({"role": "assistant", "content": "", "refusal": None})

    def chunks(self, ev: ChatEvent) -> list[dict[str, Any]]:
        if isinstance(ev, TextDelta):
            lps = self._logprobs(ev)
            return [self._chunk({"content": ev.text}, logprobs={"content": lps} if lps else None)]
        if isinstance(ev, ReasoningDelta):
            return [self._chunk({"reasoning_content": ev.text, "reasoning": ev.text})]
        if isinstance(ev, ToolCall):
            self.tool_calls.append(ev)
            return [self._chunk({"tool_calls": [tool_call_dict(ev)]})]
        if isinstance(ev, FinishEvent):
            return self._last(self._chunk({}, finish_reason=self._finish_reason(ev)), ev.usage)
        return []  # Warning: logged by the caller, not sent

    def add(self, ev: ChatEvent) -> None:
        if isinstance(ev, TextDelta):
            self.content.append(ev.text)
            self.logprobs.extend(self._logprobs(ev))
        elif isinstance(ev, ReasoningDelta):
            self.reasoning.append(ev.text)
        elif isinstance(ev, ToolCall):
            self.tool_calls.append(ev)

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content),
            "refusal": None,  # OpenAI's field; mlxd models never refuse by protocol
        }
        if self.tool_calls and not message["content"]:
            message["content"] = None
        if self.reasoning:
            message["reasoning_content"] = message["reasoning"] = "".join(self.reasoning)
        if self.tool_calls:
            message["tool_calls"] = [tool_call_dict(c) for c in self.tool_calls]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": {"content": self.logprobs} if self.texts is not None else None,
            "finish_reason": self._finish_reason(finish),
        }
        return self._body(choice, finish.usage)

    def _finish_reason(self, finish: FinishEvent) -> str:
        if self.tool_calls and finish.reason == FinishReason.STOP:
            return "tool_calls"
        return _FINISH[finish.reason]

    def _logprobs(self, ev: TextDelta) -> list[dict[str, Any]]:
        if self.texts is None or not ev.logprobs:
            return []
        return chat_logprobs(ev.logprobs, self.texts)


@dataclass(slots=True)
class CompletionWire(OpenAIFrames):
    model: str
    texts: TokenTexts | None = None
    include_usage: bool = False
    id: str = field(default_factory=lambda: "cmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))
    text: list[str] = field(default_factory=list)
    offset: int = 0
    logprobs: list[CompletionLogprobs] = field(default_factory=list)

    chunk_object: ClassVar[str] = "text_completion"
    body_object: ClassVar[str] = "text_completion"

    def _chunk(
        self, text: str, logprobs: CompletionLogprobs | None = None, finish: str | None = None
    ) -> dict[str, Any]:
        return self._streamed(
            {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        )

    def first_chunk(self) -> None:
        return None  # completions have no role chunk

    def chunks(self, ev: ChatEvent) -> list[dict[str, Any]]:
        if isinstance(ev, TextDelta):
            return [self._chunk(ev.text, self._logprobs(ev))]
        if isinstance(ev, FinishEvent):
            return self._last(self._chunk("", finish=_FINISH[ev.reason]), ev.usage)
        return []

    def add(self, ev: ChatEvent) -> None:
        if isinstance(ev, TextDelta):
            lps = self._logprobs(ev)
            if lps is not None:
                self.logprobs.append(lps)
            self.text.append(ev.text)

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        choice = {
            "index": 0,
            "text": "".join(self.text),
            "logprobs": merge_completion_logprobs(self.logprobs) if self.texts else None,
            "finish_reason": _FINISH[finish.reason],
        }
        return self._body(choice, finish.usage)

    def _logprobs(self, ev: TextDelta) -> CompletionLogprobs | None:
        if self.texts is None or not ev.logprobs:
            self.offset += len(ev.text)
            return None
        lps = completion_logprobs(ev.logprobs, self.texts, self.offset)
        self.offset += len(ev.text)
        return lps
