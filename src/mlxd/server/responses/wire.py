"""ChatEvents -> OpenAI Responses bodies and stream events (a generation.Wire).

Output items follow the events in order: reasoning is a `reasoning` item (its text as one
`reasoning_text` part), answer text a `message` item (one `output_text` part), each tool call
a `function_call` item (`custom_tool_call` for a custom tool). The stream is response.created
and response.in_progress, then per item output_item.added, its part and text or argument
deltas and their `.done` events, output_item.done, and last response.completed
(response.incomplete when max_output_tokens cut it); every event names its type in an
`event:` line and carries a sequence_number.
Streaming and one body share the same item state, so both give the same output.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxd.chat.json_text import loads_json
from mlxd.errors import MlxdError
from mlxd.server.responses.schemas import ResponsesRequest, ToolChoiceFunction
from mlxd.server.responses.tools import CUSTOM_INPUT, ToolOrigin
from mlxd.server.sse import COMMENT_KEEP_ALIVE, named_event
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage

if TYPE_CHECKING:  # annotations only
    from mlxd.types import ChatEvent

Event = dict[str, Any]


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _custom_input(arguments: str) -> str:
    """A custom tool's raw input from the call's {"input": ...} arguments."""
    try:
        value = loads_json(arguments).get(CUSTOM_INPUT)
    except (ValueError, AttributeError):
        value = None
    return value if isinstance(value, str) else arguments


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


@dataclass(slots=True)
class ResponsesWire:
    model: str
    request: ResponsesRequest
    id: str = field(default_factory=lambda: _new_id("resp_"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    output: list[dict[str, Any]] = field(default_factory=list)
    open_kind: str | None = None  # "message" or "reasoning": the item text goes to
    sequence: int = 0
    origins: dict[str, ToolOrigin] | None = None  # the request's tools, once a call comes

    # ---- generation.Wire ------------------------------------------------------------

    def keep_alive(self) -> bytes:
        return COMMENT_KEEP_ALIVE

    def opening(self, known: Usage | None = None) -> list[bytes]:
        created = {"type": "response.created", "response": self._response("in_progress")}
        progress = {"type": "response.in_progress", "response": self._response("in_progress")}
        return [self._frame(created), self._frame(progress)]

    def frames(self, ev: ChatEvent) -> list[bytes]:
        events = self._finish(ev) if isinstance(ev, FinishEvent) else self._events(ev)
        return [self._frame(e) for e in events]

    def closing(self) -> list[bytes]:
        return []

    def error_frames(self, err: MlxdError) -> list[bytes]:
        error = {"type": "error", "code": err.code, "message": err.message, "param": err.param}
        code = "server_error" if err.http_status >= 500 else (err.code or "invalid_request")
        failed = self._response("failed", error={"code": code, "message": err.message})
        return [self._frame(error), self._frame({"type": "response.failed", "response": failed})]

    def add(self, ev: ChatEvent) -> None:
        self._events(ev)

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        events = self._finish(finish)
        final: dict[str, Any] = events[-1]["response"]
        return final

    # ---- item state -----------------------------------------------------------------

    def _events(self, ev: ChatEvent) -> list[Event]:
        """Update the output items with one event; the stream events that say so."""
        if isinstance(ev, TextDelta | ReasoningDelta) and ev.text:
            kind = "message" if isinstance(ev, TextDelta) else "reasoning"
            events = self._into(kind)
            item, index = self.output[-1], len(self.output) - 1
            item["content"][0]["text"] += ev.text
            delta = {"item_id": item["id"], "output_index": index, "content_index": 0}
            if kind == "message":
                return [
                    *events,
                    {
                        "type": "response.output_text.delta",
                        **delta,
                        "delta": ev.text,
                        "logprobs": [],
                    },
                ]
            return [*events, {"type": "response.reasoning_text.delta", **delta, "delta": ev.text}]
        if isinstance(ev, ToolCall):
            return self._close() + self._call(ev)
        return []  # empty deltas; Warning: logged by the caller, not sent

    def _call(self, ev: ToolCall) -> list[Event]:
        """A function_call item, or a custom_tool_call for a custom tool; a namespaced
        function's call names its namespace (responses.tools)."""
        if self.origins is None:
            self.origins = self.request.flat_tools().origins
        origin = self.origins.get(ev.name, ToolOrigin(ev.name))
        custom = origin.custom
        field, text = "arguments", ev.arguments
        if custom:
            field, text = "input", _custom_input(ev.arguments)
        item: dict[str, Any] = {
            "id": _new_id("ctc_" if custom else "fc_"),
            "type": "custom_tool_call" if custom else "function_call",
            "status": "in_progress",
            "call_id": ev.id,
            "name": origin.name,
            field: "",
        }
        if origin.namespace is not None:
            item["namespace"] = origin.namespace
        self.output.append(item)
        index = len(self.output) - 1
        added = {"type": "response.output_item.added", "output_index": index, "item": dict(item)}
        item.update({field: text, "status": "completed"})
        where = {"item_id": item["id"], "output_index": index}
        kind = "custom_tool_call_input" if custom else "function_call_arguments"
        return [
            added,
            {"type": f"response.{kind}.delta", **where, "delta": text},
            {"type": f"response.{kind}.done", **where, field: text},
            {"type": "response.output_item.done", "output_index": index, "item": dict(item)},
        ]

    def _into(self, kind: str) -> list[Event]:
        """Make a `kind` item the open one: close the other, add a new item and its part."""
        if self.open_kind == kind:
            return []
        events = self._close()
        item: dict[str, Any]
        if kind == "message":
            item = {"id": _new_id("msg_"), "type": "message", "role": "assistant", "content": []}
            part: dict[str, Any] = {
                "type": "output_text",
                "text": "",
                "annotations": [],
                "logprobs": [],
            }
        else:
            item = {"id": _new_id("rs_"), "type": "reasoning", "summary": [], "content": []}
            part = {"type": "reasoning_text", "text": ""}
        item["status"] = "in_progress"
        self.output.append(item)
        self.open_kind = kind
        index = len(self.output) - 1
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": copy.deepcopy(item),
            }
        )
        item["content"].append(part)
        events.append({"type": "response.content_part.added", **where, "part": dict(part)})
        return events

    def _close(self, status: str = "completed") -> list[Event]:
        """Finish the open item: its text's .done, content_part.done, output_item.done."""
        if self.open_kind is None:
            return []
        item, index = self.output[-1], len(self.output) - 1
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if self.open_kind == "message":
            done = {
                "type": "response.output_text.done",
                **where,
                "text": part["text"],
                "logprobs": [],
            }
        else:
            done = {"type": "response.reasoning_text.done", **where, "text": part["text"]}
        self.open_kind = None
        item["status"] = status
        return [
            done,
            {"type": "response.content_part.done", **where, "part": dict(part)},
            {
                "type": "response.output_item.done",
                "output_index": index,
                "item": copy.deepcopy(item),
            },
        ]

    def _finish(self, ev: FinishEvent) -> list[Event]:
        cut = ev.reason in (FinishReason.LENGTH, FinishReason.LOOP)
        events = self._close("incomplete" if cut else "completed")
        status = "incomplete" if cut else "completed"
        body = self._response(status, usage=usage_body(ev.usage))
        return [*events, {"type": f"response.{status}", "response": body}]

    def _frame(self, body: Event) -> bytes:
        body["sequence_number"] = self.sequence
        self.sequence += 1
        return named_event(body["type"], body)

    # ---- the response object --------------------------------------------------------

    def _format(self) -> dict[str, Any]:
        fmt = self.request.text.format if self.request.text else None
        if fmt is None:
            return {"type": "text"}
        return fmt.model_dump(by_alias=True, exclude_none=True)

    def _response(
        self,
        status: str,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        req = self.request
        done = status in ("completed", "incomplete")
        choice = req.tool_choice
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": copy.deepcopy(self.output) if done else [],
            "parallel_tool_calls": True
            if req.parallel_tool_calls is None
            else req.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": {
                "effort": req.reasoning.effort if req.reasoning else None,
                "summary": None,
            },
            "store": False,
            "temperature": req.temperature,
            "text": {"format": self._format()},
            "tool_choice": choice.model_dump()
            if isinstance(choice, ToolChoiceFunction)
            else (choice or "auto"),
            "tools": [t.model_dump() for t in req.tools or []],
            "top_p": req.top_p,
            "truncation": req.truncation or "disabled",
            "usage": usage,
            "user": None,
            "metadata": req.metadata or {},
        }
