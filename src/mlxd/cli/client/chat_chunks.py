"""OpenAI chat-completion stream chunks (server-sent events) back into the chat layer's
events: the inverse of the server's ChatWire, so `mlxd run/chat --server` renders exactly
what the in-process engine gives (TextDelta, ReasoningDelta, ToolCall, then one
FinishEvent with usage). Pure: body lines in, events out; no I/O, no timing.

Tool calls may arrive whole (mlxd) or in pieces by `index` (OpenAI): a call is given once
the stream moves past it. The FinishEvent comes at `data: [DONE]`, after the usage chunk;
an error frame (`{"error": {...}}`) ends the stream with FinishEvent(ERROR) and its code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxd.errors import EngineFault, EngineUnavailable
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage

if TYPE_CHECKING:  # annotations only
    from mlxd.types import ChatEvent

# The wire's finish_reason -> ours (OpenAI's content_filter / function_call included).
FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.STOP,
}


@dataclass(slots=True)
class _PartialCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""

    def call(self) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_{self.index}",
            name=self.name,
            arguments=self.arguments or "{}",
            index=self.index,
        )


@dataclass(slots=True)
class ChunkDecoder:
    """One streamed chat completion. feed() each body line (without its line break), then
    close() when the body ends; `finished` once the FinishEvent was given (later lines are
    ignored). `model` is the name the server answered with."""

    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    finished: bool = False
    _data: list[str] = field(default_factory=list)
    _reason: FinishReason | None = None
    _calls: dict[int, _PartialCall] = field(default_factory=dict)

    def feed(self, line: str) -> list[ChatEvent]:
        """One SSE line: `data:` lines gather until a blank line dispatches them."""
        if self.finished:
            return []
        line = line.removesuffix("\r")
        if not line:
            return self._dispatch()
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return []  # comments (":..."), `event:`, `id:`, `retry:`: nothing to show

    def close(self) -> list[ChatEvent]:
        """The body ended: a stream that never said [DONE] was cut off."""
        events = self._dispatch()
        if self.finished:
            return events
        cut = EngineUnavailable("the server closed the stream before the answer ended")
        return events + self._fail(cut.code, cut.message)

    def _dispatch(self) -> list[ChatEvent]:
        data = "\n".join(self._data)
        self._data.clear()
        if not data:
            return []
        if data == "[DONE]":
            return self._finish(FinishEvent(self._reason or FinishReason.STOP, self.usage))
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            return self._fail(EngineFault.code, f"the server sent a non-JSON chunk {data[:80]!r}")
        if not isinstance(chunk, dict):
            return self._fail(EngineFault.code, "the server sent a chunk that is not an object")
        return self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> list[ChatEvent]:
        error = chunk.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            return self._fail(error.get("code"), str(error.get("message") or "generation failed"))
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk["usage"])
        events: list[ChatEvent] = []
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events += self._choice(choice)
        return events

    def _choice(self, choice: dict[str, Any]) -> list[ChatEvent]:
        delta = choice.get("delta") or {}
        events: list[ChatEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        content = delta.get("content")
        if reasoning or content:
            events += self._flush_calls()
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning))
        if isinstance(content, str) and content:
            events.append(TextDelta(content))
        for part in delta.get("tool_calls") or ():
            if isinstance(part, dict):
                events += self._tool_call_part(part)
        reason = choice.get("finish_reason")
        if reason:
            self._reason = FINISH_REASONS.get(reason, FinishReason.STOP)
        return events

    def _tool_call_part(self, part: dict[str, Any]) -> list[ChatEvent]:
        """One piece of a tool call: a new index gives the calls before it."""
        index = part.get("index", len(self._calls))
        index = index if isinstance(index, int) else len(self._calls)
        events = [] if index in self._calls else self._flush_calls()
        call = self._calls.setdefault(index, _PartialCall(index))
        if isinstance(part.get("id"), str):
            call.id = part["id"]
        function = part.get("function") or {}
        call.name += function.get("name") or ""
        arguments = function.get("arguments")
        call.arguments += arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        return events

    def _flush_calls(self) -> list[ChatEvent]:
        calls: list[ChatEvent] = [c.call() for c in sorted(self._calls.values(), key=_index)]
        self._calls.clear()
        return calls

    def _fail(self, code: object, message: str) -> list[ChatEvent]:
        finish = FinishEvent(
            FinishReason.ERROR,
            self.usage,
            error=message,
            error_code=code if isinstance(code, str) else None,
        )
        return self._finish(finish)

    def _finish(self, finish: FinishEvent) -> list[ChatEvent]:
        self.finished = True
        return [*self._flush_calls(), finish]


def _index(call: _PartialCall) -> int:
    return call.index


def usage_of(body: dict[str, Any]) -> Usage:
    """OpenAI's usage object (cached prompt tokens under prompt_tokens_details, reasoning
    tokens under completion_tokens_details)."""
    details = body.get("prompt_tokens_details") or {}
    answer = body.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=_count(body.get("prompt_tokens")),
        completion_tokens=_count(body.get("completion_tokens")),
        cached_tokens=_count(details.get("cached_tokens") if isinstance(details, dict) else 0),
        reasoning_tokens=_count(answer.get("reasoning_tokens") if isinstance(answer, dict) else 0),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
