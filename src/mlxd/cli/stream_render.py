"""Render the chat layer's ChatEvents on a terminal or a pipe, and collect them for --json.

The server turns the same events into SSE; here text goes to stdout, reasoning (dimmed) and
warnings to stderr, tool calls as JSON lines. Pure Python: no mlx, no prompt_toolkit.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from mlxd import errors
from mlxd.errors import MlxdError
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Warning

if TYPE_CHECKING:  # annotations only
    from mlxd.types import ChatEvent

# Plain ANSI rather than rich: importing rich (~0.15 s) would sit on `run`'s start-up path.
DIM, RESET = "\x1b[2m", "\x1b[0m"


@dataclass(slots=True)
class Answer:
    """Everything one request produced, in the shape `mlxd run --json` prints. `remote`:
    the answer came over HTTP, so its timings are the client's (see `timings_json`)."""

    model: str
    remote: bool = False
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    finish: FinishEvent | None = None

    def to_json(self) -> dict[str, Any]:
        finish = self.finish
        usage = finish.usage if finish else None
        return {
            "model": self.model,
            "content": self.content,
            "reasoning": self.reasoning or None,
            "tool_calls": [tool_call_json(c) for c in self.tool_calls],
            "finish_reason": finish.reason.value if finish else None,
            "usage": None
            if usage is None
            else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
                "cached_tokens": usage.cached_tokens,
            },
            "timings": None if finish is None else timings_json(finish, remote=self.remote),
            "warnings": self.warnings,
        }


def timings_json(finish: FinishEvent, *, remote: bool = False) -> dict[str, Any]:
    """`--json`'s timings. remote=True (over HTTP): ttft_s and total_s are measured by the
    client from sending the request, decode speed from them and the usage; what only the
    engine knows (time queued, draft tokens) is null."""
    timings = finish.timings
    return {
        "queued_s": None if remote else round(timings.queued_s, 6),
        "ttft_s": round(timings.ttft_s, 6),
        "total_s": round(timings.total_s, 6),
        "decode_tokens_per_s": round(decode_tps(finish), 3),
        "draft_tokens": None if remote else timings.draft_tokens,
        "accepted_draft_tokens": None if remote else timings.accepted_draft_tokens,
        "draft_kind": None if remote else timings.draft_kind,
    }


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    """The OpenAI shape of one tool call (what the server sends in message.tool_calls)."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def decode_tps(finish: FinishEvent) -> float:
    """Decode speed: tokens after the first over the time after the first token."""
    span = finish.timings.total_s - finish.timings.ttft_s
    tokens = finish.usage.completion_tokens - 1
    return tokens / span if tokens > 0 and span > 0 else 0.0


def error_from_finish(finish: FinishEvent) -> MlxdError:
    """The MlxdError subclass whose code the engine reported, so the exit code matches."""
    return errors.from_code(finish.error_code, finish.error)


@dataclass(slots=True)
class Renderer:
    """Writes events as they arrive (stream=True) or all at once at the finish.

    quiet=True writes nothing (--json collects only). Reasoning goes to stderr, dimmed when
    stderr is a terminal; show_reasoning=False hides it.
    """

    answer: Answer
    stream: bool = True
    quiet: bool = False
    show_reasoning: bool = True
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _last_out: str = field(default="\n", init=False)  # so a finish can end the line
    _reasoning_open: bool = field(default=False, init=False)

    def consume(self, events: Iterable[ChatEvent]) -> Answer:
        """Render every event; return the answer once its FinishEvent arrived."""
        for event in events:
            self.on_event(event)
        return self.answer

    def on_event(self, event: ChatEvent) -> None:
        answer = self.answer
        if isinstance(event, TextDelta):
            answer.content += event.text
            if self.stream:
                self._text(event.text)
        elif isinstance(event, ReasoningDelta):
            answer.reasoning += event.text
            if self.stream:
                self._reasoning(event.text)
        elif isinstance(event, ToolCall):
            answer.tool_calls.append(event)
            if self.stream:
                self._tool_call(event)
        elif isinstance(event, Warning):
            answer.warnings.append(event.message)
            self._warning(event.message)
        elif isinstance(event, FinishEvent):
            answer.finish = event
            self._finish()

    def _text(self, text: str) -> None:
        if not text or self.quiet:
            return
        self._close_reasoning()
        self.out.write(text)
        self.out.flush()
        self._last_out = text[-1]

    def _reasoning(self, text: str) -> None:
        if not text or self.quiet or not self.show_reasoning:
            return
        dim = self.err.isatty()
        if not self._reasoning_open:
            self._reasoning_open = True
            if dim:
                self.err.write(DIM)
        self.err.write(text)
        self.err.flush()

    def _close_reasoning(self) -> None:
        if not self._reasoning_open:
            return
        self._reasoning_open = False
        if self.err.isatty():
            self.err.write(RESET)
        if not self.answer.reasoning.endswith("\n"):
            self.err.write("\n")
        self.err.flush()

    def _tool_call(self, call: ToolCall) -> None:
        if self.quiet:
            return
        self._close_reasoning()
        if self._last_out != "\n":
            self.out.write("\n")
        self.out.write(json.dumps(tool_call_json(call), ensure_ascii=False) + "\n")
        self.out.flush()
        self._last_out = "\n"

    def _warning(self, message: str) -> None:
        if self.quiet:
            return
        self._close_reasoning()
        self.err.write("mlxd: warning: " + " ".join(message.split()) + "\n")
        self.err.flush()

    def _finish(self) -> None:
        if not self.stream:
            self._flush_all()
        self._close_reasoning()
        if not self.quiet and self._last_out != "\n":
            self.out.write("\n")
            self.out.flush()
            self._last_out = "\n"

    def _flush_all(self) -> None:
        """--no-stream: reasoning, then content, then tool calls, each once."""
        self._reasoning(self.answer.reasoning)
        self._text(self.answer.content)
        for call in self.answer.tool_calls:
            self._tool_call(call)


def check_finish(answer: Answer) -> None:
    """Raise the request's error when it ended in one (a missing FinishEvent is an engine fault)."""
    finish = answer.finish
    if finish is None:
        raise errors.EngineFault("the answer stream ended without a finish event")
    if finish.reason is FinishReason.ERROR:
        raise error_from_finish(finish)
