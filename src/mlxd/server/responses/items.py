"""Input items of OpenAI's Responses API (messages and their parts, function calls and
outputs, reasoning); strict like every wire schema (mlxd.server.fields)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

from mlxd.chat.json_text import JsonTooDeep, loads_json
from mlxd.chat.messages import join_text
from mlxd.server.fields import (
    CallId,
    FunctionName,
    RefusedKind,
    WireModel,
)

MAX_ITEMS = 10_000
MAX_PARTS = 10_000
NO_STATE = "mlxd keeps no response state; send the whole conversation in 'input'"


class InputText(WireModel):
    type: Literal["input_text"]
    text: StrictStr


class OutputText(WireModel):
    """An earlier answer sent back (annotations and logprobs are ignored)."""

    type: Literal["output_text"]
    text: StrictStr


class InputImage(WireModel):
    """An image by URL (a data: URL, or http(s) if the operator allows); the chat layer reads
    and checks it (a vision model's). Uploaded files (`file_id`) are refused: no file store."""

    type: Literal["input_image"]
    image_url: Annotated[StrictStr, Field(min_length=1)] | None = None
    file_id: StrictStr | None = None
    detail: Literal["low", "high", "auto"] | None = None  # accepted; the processor decides

    @model_validator(mode="after")
    def _by_url(self) -> InputImage:
        if self.file_id is not None or self.image_url is None:
            raise ValueError("input_image needs an image_url (uploaded files are not supported)")
        return self


class UnsupportedPart(RefusedKind):
    type: Literal["input_file", "input_audio", "refusal"]


ContentPart = Annotated[
    InputText | OutputText | InputImage | UnsupportedPart, Field(discriminator="type")
]


class MessageItem(WireModel):
    """A message; `type` may be left out (the SDK's EasyInputMessage)."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: StrictStr | Annotated[list[ContentPart], Field(max_length=MAX_PARTS)]

    def parts(self) -> list[dict[str, Any]]:
        """Text and image parts as the chat layer takes them (OpenAI's chat shapes)."""
        if isinstance(self.content, str):
            return [{"type": "text", "text": self.content}]
        out: list[dict[str, Any]] = []
        for p in self.content:
            if isinstance(p, InputImage):
                out.append({"type": "image_url", "image_url": {"url": p.image_url}})
            elif not isinstance(p, UnsupportedPart):
                out.append({"type": "text", "text": p.text})
        return out


class FunctionCallItem(WireModel):
    """A call the model made earlier; `arguments` is a JSON object as a string."""

    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: StrictStr
    namespace: FunctionName | None = None  # Codex: the namespace tool the function is in

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, v: str) -> str:
        try:
            value = loads_json(v) if v.strip() else {}
        except JsonTooDeep as e:
            raise ValueError(f"arguments are {e.msg}") from None
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object as a string")
        return v


class FunctionCallOutputItem(WireModel):
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: CallId
    output: StrictStr | Annotated[list[InputText], Field(max_length=MAX_PARTS)]

    def text(self) -> str:
        out = self.output
        return out if isinstance(out, str) else join_text(p.text for p in out)


class CustomToolCallItem(WireModel):
    """A call of a freeform (custom) tool the model made earlier: its raw input text."""

    type: Literal["custom_tool_call"]
    call_id: CallId
    name: FunctionName
    input: StrictStr
    namespace: FunctionName | None = None


class ReasoningPart(WireModel):
    type: Literal["reasoning_text", "summary_text"]
    text: StrictStr


class ReasoningItem(WireModel):
    """Earlier reasoning sent back: its text goes to the next assistant turn
    (`encrypted_content` is ignored)."""

    type: Literal["reasoning"]
    summary: Annotated[list[ReasoningPart], Field(max_length=MAX_PARTS)] = []
    content: Annotated[list[ReasoningPart], Field(max_length=MAX_PARTS)] | None = None

    def text(self) -> str:
        return join_text(p.text for p in (self.content or self.summary))


def _item_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("type", "message"))
    return str(getattr(value, "type", "message"))


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[FunctionCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_item",
        custom_error_message="input items must be message, function_call, function_call_output, "
        "custom_tool_call, custom_tool_call_output or reasoning items",
    ),
]
