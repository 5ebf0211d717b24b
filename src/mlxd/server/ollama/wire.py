"""ChatEvents -> Ollama's bodies and NDJSON lines (/api/chat and /api/generate).

A stream is one JSON object per line, `"done": false` until the last, which carries
`done_reason`, the token counts and the durations (ns). Durations are measured here:
`load_duration` is the request's time before its generation started (model lookup or load,
prompt rendering), `prompt_eval_duration` until the first event, `eval_duration` from there to
the end. An error after the stream started is one `{"error": ...}` line, as Ollama sends.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mlxd.errors import MlxdError
from mlxd.server.sse import dumps
from mlxd.types import ChatEvent, FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall

NDJSON = "application/x-ndjson"
# Anything else ends as "stop".
_DONE_REASON = {FinishReason.LENGTH: "length", FinishReason.LOOP: "length"}


def line(obj: object) -> bytes:
    return dumps(obj).encode() + b"\n"


def created_at() -> str:
    """Now, as Ollama's RFC 3339 timestamps (UTC)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    """A tool call in Ollama's shape: `function.arguments` an object, not a string."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = {}
    return {
        "id": call.id,
        "function": {"index": call.index, "name": call.name, "arguments": arguments},
    }


@dataclass(slots=True)
class OllamaWire:
    """One /api/chat (`chat`) or /api/generate request's output; `received_ns`: when the
    request arrived (time.perf_counter_ns)."""

    model: str
    received_ns: int
    chat: bool = True
    started_ns: int = field(default_factory=time.perf_counter_ns)
    first_ns: int | None = None
    content: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)

    def _chunk(
        self, text: str = "", thinking: str | None = None, calls: Any = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "created_at": created_at()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking is not None:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            body["message"] = message
        else:
            body["response"] = text
            if thinking is not None:
                body["thinking"] = thinking
        return body | {"done": False}

    def opening(self, known: object = None) -> list[bytes]:
        return []

    def keep_alive(self) -> bytes:
        return line(self._chunk())  # an empty chunk: every line of the stream is JSON

    def frames(self, ev: ChatEvent) -> list[bytes]:
        self._seen(ev)
        if isinstance(ev, TextDelta):
            return [line(self._chunk(ev.text))]
        if isinstance(ev, ReasoningDelta):
            return [line(self._chunk(thinking=ev.text))]
        if isinstance(ev, ToolCall):
            self.tool_calls.append(ev)
            return [line(self._chunk(calls=[tool_call_json(ev)]))]
        if isinstance(ev, FinishEvent):
            return [line(self._chunk() | self._done(ev))]
        return []

    def closing(self) -> list[bytes]:
        return []

    def error_frames(self, err: MlxdError) -> list[bytes]:
        return [line({"error": err.message})]

    def add(self, ev: ChatEvent) -> None:
        self._seen(ev)
        if isinstance(ev, TextDelta):
            self.content.append(ev.text)
        elif isinstance(ev, ReasoningDelta):
            self.thinking.append(ev.text)
        elif isinstance(ev, ToolCall):
            self.tool_calls.append(ev)

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        thinking = "".join(self.thinking) if self.thinking else None
        calls = [tool_call_json(c) for c in self.tool_calls]
        return self._chunk("".join(self.content), thinking, calls) | self._done(finish)

    def _seen(self, ev: ChatEvent) -> None:
        if self.first_ns is None and isinstance(ev, TextDelta | ReasoningDelta | ToolCall):
            self.first_ns = time.perf_counter_ns()

    def _done(self, finish: FinishEvent) -> dict[str, Any]:
        """The last object's fields: why it ended, the counts and the durations (ns)."""
        end = time.perf_counter_ns()
        first = self.first_ns if self.first_ns is not None else end
        out: dict[str, Any] = {
            "done": True,
            "done_reason": _DONE_REASON.get(finish.reason, "stop"),
            "total_duration": end - self.received_ns,
            "load_duration": self.started_ns - self.received_ns,
            "prompt_eval_count": finish.usage.prompt_tokens,
            "prompt_eval_duration": first - self.started_ns,
            "eval_count": finish.usage.completion_tokens,
            "eval_duration": end - first,
        }
        if not self.chat:
            out["context"] = []  # Ollama's deprecated token context; mlxd keeps none
        return out


def loaded(model: str, chat: bool, reason: str = "load") -> dict[str, Any]:
    """The answer to a request without a prompt: Ollama's "load the model" request (or,
    with keep_alive 0, "unload")."""
    body: dict[str, Any] = {"model": model, "created_at": created_at()}
    if chat:
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    return body | {"done": True, "done_reason": reason}
