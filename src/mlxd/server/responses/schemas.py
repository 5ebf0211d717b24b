"""Wire schemas of OpenAI's Responses API: POST /v1/responses.

Strict like mlxd.server.openai.schemas. mlxd keeps no response state, so what needs it is refused
with a 400 that says so (`previous_response_id`, `store: true`, `background`, `conversation`,
`prompt`, uploaded `file_id`s), as are files and audio; tools the provider would run
(web_search, ...) are dropped, Codex's namespace and custom tools flattened
(responses.tools). Images (`input_image` by URL) go to the chat layer, which checks them
(for a vision model).
`text.format` (json_schema, json_object) and a forced `tool_choice` are enforced by the chat
layer's grammar, as on /v1/chat/completions. Unknown fields (`include`, `user`, ...) are
ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mlxd.chat.messages import effort_template_kwargs
from mlxd.chat.tool_choice import ToolChoice
from mlxd.server.fields import (
    MAX_TOOLS,
    FunctionName,
    JsonSchemaFormat,
    MaxTokens,
    ModelName,
    Temperature,
    TopLogprobs,
    TopP,
    WireModel,
)
from mlxd.server.responses import inputs
from mlxd.server.responses.items import MAX_ITEMS, NO_STATE, InputItem
from mlxd.server.responses.tools import AnyTool, FlatTools, flatten_tools


class ToolChoiceFunction(WireModel):
    type: Literal["function", "custom"]
    name: FunctionName


class ReasoningParam(WireModel):
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


class TextParam(WireModel):
    format: TextFormat | None = None


class ResponsesRequest(WireModel):
    OPTION_FIELDS: ClassVar[Mapping[str, str]] = {"response_format": "text.format"}
    model: ModelName | None = None
    input: StrictStr | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_ITEMS)]
    instructions: StrictStr | None = None
    tools: Annotated[list[AnyTool], Field(max_length=MAX_TOOLS)] | None = None
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
        names = set(self.flat_tools().origins)
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

    def flat_tools(self) -> FlatTools:
        """The tools as the model sees them (responses.tools), and where each comes from."""
        return flatten_tools(self.tools or [])

    def chat_messages(self) -> list[dict[str, Any]]:
        return inputs.chat_messages(self.instructions, self.input, self.flat_tools())

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return self.flat_tools().functions or None

    def chat_tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, ToolChoiceFunction):
            return ToolChoice.named(choice.name)
        return ToolChoice.parse(choice)

    def template_kwargs(self) -> dict[str, Any] | None:
        """reasoning.effort as the switches reasoning templates read (chat.messages)."""
        effort = self.reasoning.effort if self.reasoning else None
        return None if effort is None else effort_template_kwargs(effort)
