"""Wire schemas of OpenAI's Responses API: POST /v1/responses.

Strict like mlxd.server.openai.schemas. mlxd keeps no response state, so what needs it is refused
with a 400 that says so (`previous_response_id`, `store: true`, `background`, `conversation`,
`prompt`, uploaded `file_id`s), as are files, audio and tools other than functions. Images
(`input_image` by URL) go to the chat layer, which checks them (for a vision model).
`text.format` (json_schema, json_object) and a forced `tool_choice` are enforced by the chat
layer's grammar, as on /v1/chat/completions. Unknown fields (`include`, `user`, ...) are
ignored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mlxd.chat.messages import join_text
from mlxd.server.fields import (
    MAX_TOOLS,
    CallId,
    FunctionName,
    JsonSchemaFormat,
    MaxTokens,
    ModelName,
    Temperature,
    TopLogprobs,
    TopP,
)
from mlxd.server.fields import WIRE_CONFIG as _CFG

MAX_ITEMS = 10_000
MAX_PARTS = 10_000
NO_STATE = "mlxd keeps no response state; send the whole conversation in 'input'"


class InputText(BaseModel):
    model_config = _CFG
    type: Literal["input_text"]
    text: StrictStr


class OutputText(BaseModel):
    """An earlier answer sent back (annotations and logprobs are ignored)."""

    model_config = _CFG
    type: Literal["output_text"]
    text: StrictStr


class InputImage(BaseModel):
    """An image by URL (a data: URL, or http(s) if the operator allows); the chat layer reads
    and checks it (a vision model's). Uploaded files (`file_id`) are refused: no file store."""

    model_config = _CFG
    type: Literal["input_image"]
    image_url: Annotated[StrictStr, Field(min_length=1)] | None = None
    file_id: StrictStr | None = None
    detail: Literal["low", "high", "auto"] | None = None  # accepted; the processor decides

    @model_validator(mode="after")
    def _by_url(self) -> InputImage:
        if self.file_id is not None or self.image_url is None:
            raise ValueError("input_image needs an image_url (uploaded files are not supported)")
        return self


class UnsupportedPart(BaseModel):
    model_config = _CFG
    type: Literal["input_file", "input_audio", "refusal"]

    @model_validator(mode="after")
    def _refuse(self) -> UnsupportedPart:
        raise ValueError(f"'{self.type}' content is not supported")


ContentPart = Annotated[
    InputText | OutputText | InputImage | UnsupportedPart, Field(discriminator="type")
]


class MessageItem(BaseModel):
    """A message; `type` may be left out (the SDK's EasyInputMessage)."""

    model_config = _CFG
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


class FunctionCallItem(BaseModel):
    """A call the model made earlier; `arguments` is a JSON object as a string."""

    model_config = _CFG
    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: StrictStr

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, v: str) -> str:
        try:
            value = json.loads(v) if v.strip() else {}
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object as a string")
        return v


class FunctionCallOutputItem(BaseModel):
    model_config = _CFG
    type: Literal["function_call_output"]
    call_id: CallId
    output: StrictStr | Annotated[list[InputText], Field(max_length=MAX_PARTS)]

    def text(self) -> str:
        out = self.output
        return out if isinstance(out, str) else join_text(p.text for p in out)


class ReasoningPart(BaseModel):
    model_config = _CFG
    type: Literal["reasoning_text", "summary_text"]
    text: StrictStr


class ReasoningItem(BaseModel):
    """Earlier reasoning sent back: its text goes to the next assistant turn
    (`encrypted_content` is ignored)."""

    model_config = _CFG
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
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_item",
        custom_error_message="input items must be message, function_call, function_call_output "
        "or reasoning items",
    ),
]


class FunctionTool(BaseModel):
    model_config = _CFG
    type: Literal["function"]
    name: FunctionName
    description: StrictStr | None = None
    parameters: dict[StrictStr, Any] | None = None
    strict: StrictBool | None = None

    def to_chat(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name, "parameters": self.parameters or {}}
        if self.description is not None:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


class ToolChoiceFunction(BaseModel):
    model_config = _CFG
    type: Literal["function"]
    name: FunctionName


class ReasoningParam(BaseModel):
    model_config = _CFG
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: StrictStr | None = None  # summaries are not made; the reasoning text is returned


class TextFormat(BaseModel):
    """The answer's format: free text, any JSON object, or JSON valid against `schema`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: StrictStr | None = None
    description: StrictStr | None = None
    schema_: dict[StrictStr, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None

    @model_validator(mode="after")
    def _schema_when_json_schema(self) -> TextFormat:
        if self.type == "json_schema" and self.schema_ is None:
            raise ValueError("format 'json_schema' needs a schema")
        return self

    def option(self) -> dict[str, Any] | None:
        """The chat layer's response_format option (None: free text)."""
        if self.type != "json_schema":
            return None if self.type == "text" else {"type": self.type}
        fields = self.model_dump(include={"name", "description", "schema_", "strict"})
        spec = JsonSchemaFormat.model_validate({k: v for k, v in fields.items() if v is not None})
        return {
            "type": "json_schema",
            "json_schema": spec.model_dump(by_alias=True, exclude_none=True),
        }


class TextParam(BaseModel):
    model_config = _CFG
    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    model_config = _CFG
    model: ModelName | None = None
    input: StrictStr | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_ITEMS)]
    instructions: StrictStr | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: StrictBool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    stream: StrictBool = False
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    metadata: Annotated[dict[StrictStr, StrictStr], Field(max_length=16)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # Refused: they need state mlxd does not keep, or output it does not make.
    store: StrictBool | None = None
    previous_response_id: StrictStr | None = None
    background: StrictBool | None = None
    conversation: StrictStr | dict[StrictStr, Any] | None = None
    prompt: dict[StrictStr, Any] | None = None
    top_logprobs: TopLogprobs | None = None

    @field_validator("previous_response_id", "conversation", "prompt")
    @classmethod
    def _stateless(cls, v: object, info: ValidationInfo) -> object:
        if v is not None:
            raise ValueError(f"{info.field_name} is not supported: {NO_STATE}")
        return v

    @field_validator("store", "background")
    @classmethod
    def _not_kept(cls, v: bool | None, info: ValidationInfo) -> bool | None:
        if v:
            raise ValueError(f"{info.field_name}: true is not supported: {NO_STATE}")
        return v

    @field_validator("top_logprobs")
    @classmethod
    def _no_logprobs(cls, v: int | None) -> int | None:
        if v:
            raise ValueError("top_logprobs is not supported on /v1/responses")
        return v

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> ResponsesRequest:
        names = {t.name for t in self.tools or []}
        if isinstance(self.tool_choice, ToolChoiceFunction) and self.tool_choice.name not in names:
            raise ValueError(f"tool_choice names '{self.tool_choice.name}', which is not in tools")
        if self.tool_choice == "required" and not names:
            raise ValueError("tool_choice 'required' needs tools")
        return self

    def options(self) -> dict[str, Any]:
        """Chat-layer options (mlxd.chat.options.OPTIONS names)."""
        opts: dict[str, Any] = {}
        if self.max_output_tokens is not None:
            opts["max_tokens"] = self.max_output_tokens
        if self.temperature is not None:
            opts["temperature"] = self.temperature
        if self.top_p is not None:
            opts["top_p"] = self.top_p
        fmt = self.text.format if self.text else None
        if fmt is not None and fmt.option() is not None:
            opts["response_format"] = fmt.option()
        return opts

    def forced_tool_choice(self) -> str | dict[str, Any] | None:
        """A tool_choice that forces a call, as the chat layer takes it (else None)."""
        if isinstance(self.tool_choice, ToolChoiceFunction):
            return {"type": "function", "function": {"name": self.tool_choice.name}}
        return self.tool_choice if self.tool_choice == "required" else None

    def template_kwargs(self) -> dict[str, Any] | None:
        """reasoning.effort as the switches reasoning templates read ("none": thinking off)."""
        effort = self.reasoning.effort if self.reasoning else None
        if effort is None:
            return None
        if effort == "none":
            return {"enable_thinking": False}
        return {"reasoning_effort": effort}
