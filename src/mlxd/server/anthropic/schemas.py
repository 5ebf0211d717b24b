"""Wire schemas of Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

Strict like mlxd.server.openai.schemas: no bools or strings as numbers, no NaN, every number bounded
by the option table's ranges. Images in user turns go to the chat layer as image_url parts
(for a vision model; the chat layer checks them). Content mlxd cannot serve (documents,
images in tool results, server tools) is refused with a 400 naming it; hints with nothing to
do here (`cache_control`: the prefix cache is automatic; `metadata`, `service_tier`,
`output_config.effort`) are ignored, as unknown fields are. `tool_choice` any/tool and
`output_config.format` are enforced by the chat layer's grammar, as on /v1/chat/completions.
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
    field_validator,
    model_validator,
)

from mlxd.chat.messages import join_text
from mlxd.chat.tool_choice import ToolChoice, ToolChoiceMode
from mlxd.server.anthropic import inputs
from mlxd.server.anthropic.blocks import MAX_BLOCKS, MessageParam, TextBlock, ToolName
from mlxd.server.fields import (
    MAX_MESSAGES,
    MAX_TOOLS,
    JsonSchemaFormat,
    MaxTokens,
    ModelName,
    StopList,
    Temperature,
    TopK,
    TopP,
    WireModel,
)


class ToolParam(WireModel):
    """A client tool (`type` absent or "custom"); Anthropic's server tools are refused."""

    type: StrictStr | None = None  # first, so a server tool's error names its type
    name: ToolName
    description: StrictStr | None = None
    input_schema: dict[StrictStr, Any]

    @model_validator(mode="before")
    @classmethod
    def _client_tools_only(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(f"tool type '{kind}' is not supported; only tools with input_schema")
        return data

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI function tool the chat layer takes."""
        # OpenAI's key order: templates that dump whole tools (Granite) render the same prompt.
        fn: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            fn["description"] = self.description
        return {"type": "function", "function": {**fn, "parameters": self.input_schema}}


class ToolChoiceAuto(WireModel):
    type: Literal["auto"]
    disable_parallel_tool_use: StrictBool = False


class ToolChoiceAny(WireModel):
    type: Literal["any"]
    disable_parallel_tool_use: StrictBool = False


class ToolChoiceTool(WireModel):
    type: Literal["tool"]
    name: ToolName
    disable_parallel_tool_use: StrictBool = False


class ToolChoiceNone(WireModel):
    type: Literal["none"]


ToolChoiceParam = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone,
    Field(discriminator="type"),
]


class ThinkingEnabled(WireModel):
    """Turns a reasoning model's thinking on (the `enable_thinking` template switch);
    `budget_tokens` is the engine's reasoning budget (max_reasoning_tokens): after that many
    thinking tokens the block is closed and the answer follows."""

    type: Literal["enabled"]
    budget_tokens: MaxTokens


class ThinkingDisabled(WireModel):
    type: Literal["disabled"]


class ThinkingAdaptive(WireModel):
    """The model decides (its template's default)."""

    type: Literal["adaptive"]


ThinkingParam = Annotated[
    ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive, Field(discriminator="type")
]


class JsonOutputFormat(BaseModel):
    """Structured output: the answer is JSON valid against `schema`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    type: Literal["json_schema"]
    schema_: dict[StrictStr, Any] = Field(alias="schema")


class OutputConfig(WireModel):
    format: JsonOutputFormat | None = None


class CountTokensRequest(WireModel):
    """The conversation part of a request: what /v1/messages/count_tokens counts."""

    model: ModelName | None = None  # omitted or "default": the server's model
    messages: Annotated[list[MessageParam], Field(min_length=1, max_length=MAX_MESSAGES)]
    system: StrictStr | Annotated[list[TextBlock], Field(max_length=MAX_BLOCKS)] | None = None
    tools: Annotated[list[ToolParam], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    mcp_servers: list[Any] | None = None  # Anthropic's MCP connector: refused, never ignored

    @field_validator("mcp_servers")
    @classmethod
    def _no_mcp_servers(cls, servers: list[Any] | None) -> list[Any] | None:
        if servers:
            raise ValueError(
                "mlxd does not connect to MCP servers; connect them in the client (Claude "
                "Code's --mcp-config / `claude mcp add` do) and send their tools in 'tools'"
            )
        return servers

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> CountTokensRequest:
        choice = self.tool_choice
        names = {t.name for t in self.tools or []}
        if isinstance(choice, ToolChoiceTool) and choice.name not in names:
            raise ValueError(f"tool_choice names '{choice.name}', which is not in tools")
        if isinstance(choice, ToolChoiceAny) and not names:
            raise ValueError("tool_choice 'any' needs tools")
        return self

    def system_text(self) -> str | None:
        if self.system is None or isinstance(self.system, str):
            return self.system
        return join_text(b.text for b in self.system)

    def template_kwargs(self) -> dict[str, Any] | None:
        """`thinking` as the template switch reasoning templates read."""
        if isinstance(self.thinking, ThinkingEnabled):
            return {"enable_thinking": True}
        if isinstance(self.thinking, ThinkingDisabled):
            return {"enable_thinking": False}
        return None

    def chat_messages(self) -> list[dict[str, Any]]:
        return inputs.chat_messages(self.system_text(), self.messages)

    def continues_final_turn(self) -> bool:
        """A last assistant turn with content is a prefill: the answer continues it."""
        return inputs.prefilled(self.messages)

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return [t.to_chat() for t in self.tools] if self.tools else None

    def chat_tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, ToolChoiceTool):
            return ToolChoice.named(choice.name)
        if isinstance(choice, ToolChoiceAny):
            return ToolChoice(ToolChoiceMode.REQUIRED)
        if isinstance(choice, ToolChoiceNone):
            return ToolChoice(ToolChoiceMode.NONE)
        return ToolChoice()


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages: max_tokens is required, as in Anthropic's API."""

    OPTION_FIELDS: ClassVar[Mapping[str, str]] = {
        "response_format": "output_config.format",
        "max_reasoning_tokens": "thinking.budget_tokens",
    }
    max_tokens: MaxTokens
    stream: StrictBool = False
    stop_sequences: StopList | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    output_config: OutputConfig | None = None

    @model_validator(mode="after")
    def _budget_below_max_tokens(self) -> MessagesRequest:
        if isinstance(self.thinking, ThinkingEnabled) and (
            self.thinking.budget_tokens >= self.max_tokens
        ):
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self

    def options(self) -> dict[str, Any]:
        """Chat-layer options (mlxd.chat.options.OPTIONS names)."""
        opts: dict[str, Any] = {"max_tokens": self.max_tokens}
        for name in ("temperature", "top_p", "top_k"):
            value = getattr(self, name)
            if value is not None:
                opts[name] = value
        if self.stop_sequences:
            opts["stop"] = list(self.stop_sequences)
        if isinstance(self.thinking, ThinkingEnabled):
            opts["max_reasoning_tokens"] = self.thinking.budget_tokens
        fmt = self.output_config.format if self.output_config else None
        if fmt is not None:
            spec = JsonSchemaFormat(name="output", schema=fmt.schema_)
            schema = spec.model_dump(by_alias=True, exclude_none=True)
            opts["response_format"] = {"type": "json_schema", "json_schema": schema}
        return opts
