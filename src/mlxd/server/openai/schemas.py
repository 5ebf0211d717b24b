"""Wire schemas for requests (pydantic): strict numbers, explicit bounds, clear refusals.

Numbers are strict (no bools or strings as numbers), finite (no NaN/inf) and bounded; the
bounds are config.SAMPLING_BOUNDS and config.LIMITS, as in mlxd.chat.options.OPTIONS.
Fields we cannot honour yet (`n` != 1, `echo`, `suffix`) are refused, never silently
ignored; `response_format` (text, json_object, json_schema) is enforced by a grammar.
Unknown extra fields (user, metadata, ...) are ignored, as OpenAI does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from mlxd.chat.messages import check_template_kwargs, effort_template_kwargs, join_text
from mlxd.chat.tool_choice import ToolChoice
from mlxd.config import LIMITS
from mlxd.server.fields import (
    MAX_MESSAGES,
    MAX_TOOLS,
    FunctionName,
    JsonSchemaFormat,
    MaxTokens,
    ModelName,
    Seed,
    StopList,
    StopText,
    TopLogprobs,
    WireModel,
    refused_when_set,
    within,
)

# HTTP field -> chat-layer option name; the names are the same by design (OPTIONS table).
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "repetition_context_size",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
    "loop_repeats",
    "max_reasoning_tokens",
    "seed",
    "ignore_eos",
    "draft_kind",
    "num_draft_tokens",
)


class SamplingFields(WireModel):
    """Options shared by /v1/chat/completions and /v1/completions."""

    model: ModelName | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: MaxTokens | None = None
    temperature: Annotated[StrictFloat, within("temperature")] | None = None
    top_p: Annotated[StrictFloat, within("top_p")] | None = None
    top_k: Annotated[StrictInt, within("top_k")] | None = None
    min_p: Annotated[StrictFloat, within("min_p")] | None = None
    repetition_penalty: Annotated[StrictFloat, within("repetition_penalty")] | None = None
    repetition_context_size: Annotated[StrictInt, within("repetition_context_size")] | None = None
    presence_penalty: Annotated[StrictFloat, within("presence_penalty")] | None = None
    frequency_penalty: Annotated[StrictFloat, within("frequency_penalty")] | None = None
    # Extensions with llama.cpp's server names: its repetition window, DRY, XTC; mlxd's
    # loop detection. The option table (mlxd.chat.options) checks the lists.
    repeat_last_n: Annotated[StrictInt, within("repetition_context_size")] | None = None
    dry_multiplier: Annotated[StrictFloat, within("dry_multiplier")] | None = None
    dry_base: Annotated[StrictFloat, within("dry_base")] | None = None
    dry_allowed_length: Annotated[StrictInt, within("dry_allowed_length")] | None = None
    dry_penalty_last_n: Annotated[StrictInt, within("dry_penalty_last_n")] | None = None
    dry_sequence_breakers: (
        Annotated[list[StrictStr], Field(max_length=LIMITS["dry_sequence_breakers"])] | None
    ) = None
    xtc_probability: Annotated[StrictFloat, within("xtc_probability")] | None = None
    xtc_threshold: Annotated[StrictFloat, within("xtc_threshold")] | None = None
    loop_repeats: Annotated[StrictInt, within("loop_repeats")] | None = None
    # Extension: the reasoning budget (Anthropic's thinking.budget_tokens on /v1/messages).
    max_reasoning_tokens: Annotated[StrictInt, within("max_reasoning_tokens")] | None = None
    logit_bias: (
        Annotated[
            dict[StrictStr, Annotated[StrictFloat, within("logit_bias")]],
            Field(max_length=LIMITS["logit_bias_entries"]),
        ]
        | None
    ) = None
    seed: Seed | None = None
    # The operator's max_stop_strings (config) is checked as a request is parsed.
    stop: StopText | StopList | None = None
    n: Annotated[StrictInt, Field(ge=1, le=128)] = 1
    ignore_eos: StrictBool | None = None  # extension (as in vLLM): generate past EOS
    # Extensions: speculative decoding for this request ("none" turns the server's off).
    draft_kind: Literal["none", "ngram", "model", "mtp", "dflash"] | None = None
    num_draft_tokens: Annotated[StrictInt, within("num_draft_tokens")] | None = None
    response_format: ResponseFormat | None = None

    @field_validator("n")
    @classmethod
    def _only_one_choice(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key in v or {}:
            if not key.isdigit() or len(key) > 9:
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        return v

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def sampling_options(self) -> dict[str, Any]:
        """Set sampling fields as chat-layer options (names match mlxd.chat.options.OPTIONS)."""
        opts: dict[str, Any] = {}
        for name in SAMPLING_FIELDS:
            value = getattr(self, name)
            if value is not None:
                opts[name] = value
        if self.logit_bias:
            opts["logit_bias"] = {int(k): v for k, v in self.logit_bias.items()}
        if self.stop is not None:
            opts["stop"] = self.stop_list()
        if self.response_format is not None and self.response_format.option() is not None:
            opts["response_format"] = self.response_format.option()
        return opts

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class StreamOptions(WireModel):
    include_usage: StrictBool = False


class TextPart(WireModel):
    type: Literal["text"]
    text: StrictStr


class ImageURL(WireModel):
    url: Annotated[StrictStr, Field(min_length=1)]
    detail: Literal["auto", "low", "high"] | None = None  # accepted; the processor decides


class ImagePart(WireModel):
    """OpenAI's image content part: a data: URL (http(s) only if the server allows)."""

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class FunctionCall(WireModel):
    name: FunctionName
    arguments: StrictStr | dict[str, Any] = "{}"


class MessageToolCall(WireModel):
    id: StrictStr | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(WireModel):
    """One chat message; roles and content shapes OpenAI defines: text, and images in user
    messages (read by the chat layer, chat.images)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: StrictStr | None = None
    reasoning_content: StrictStr | None = None
    reasoning: StrictStr | None = None

    @model_validator(mode="after")
    def _content_present(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a '{self.role}' message needs content")
        return self

    def to_template(self) -> dict[str, Any]:
        """The chat layer's message: text parts joined (parts kept when there are images),
        reasoning under one name."""
        msg: dict[str, Any] = {"role": self.role}
        if isinstance(self.content, list) and any(isinstance(p, ImagePart) for p in self.content):
            msg["content"] = [p.model_dump(exclude_none=True) for p in self.content]
        elif isinstance(self.content, list):
            msg["content"] = join_text(p.text for p in self.content if isinstance(p, TextPart))
        elif self.content is not None:
            msg["content"] = self.content
        if self.name is not None:
            msg["name"] = self.name
        if self.tool_calls:
            msg["tool_calls"] = [tc.model_dump(exclude_none=True) for tc in self.tool_calls]
        if self.tool_call_id is not None:
            msg["tool_call_id"] = self.tool_call_id
        reasoning = self.reasoning_content or self.reasoning
        if reasoning:
            msg["reasoning_content"] = reasoning
        return msg


class FunctionDef(WireModel):
    name: FunctionName
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class Tool(WireModel):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(WireModel):
    name: FunctionName


class NamedToolChoice(WireModel):
    type: Literal["function"]
    function: NamedFunction


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_json_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a json_schema object with a schema")
        return self

    def option(self) -> dict[str, Any] | None:
        """The chat layer's response_format option (None: free text)."""
        if self.type == "text":
            return None
        out: dict[str, Any] = {"type": self.type}
        if self.json_schema is not None:
            out["json_schema"] = self.json_schema.model_dump(by_alias=True, exclude_none=True)
        return out


class ChatCompletionRequest(SamplingFields):
    OPTION_FIELDS: ClassVar[Mapping[str, str]] = {}  # the chat options' own names
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_completion_tokens: MaxTokens | None = None
    logprobs: StrictBool = False
    top_logprobs: TopLogprobs | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    chat_template_kwargs: dict[StrictStr, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # A Jinja chat template instead of the model's (vLLM's extension); only when the operator
    # allows it (MLXD_REQUEST_CHAT_TEMPLATE=1), refused otherwise (openai.routes).
    chat_template: Annotated[StrictStr, Field(min_length=1, max_length=1 << 20)] | None = None

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> ChatCompletionRequest:
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(
                    f"tool_choice names '{self.tool_choice.function.name}', which is not in tools"
                )
        elif self.tool_choice == "required" and not self.tools:
            raise ValueError("tool_choice 'required' needs tools")
        return self

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat_messages(self) -> list[dict[str, Any]]:
        return [m.to_template() for m in self.messages]

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None

    def chat_tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            return ToolChoice.named(choice.function.name)
        return ToolChoice.parse(choice)

    def template_kwargs(self) -> dict[str, Any] | None:
        """reasoning_effort as the template switches (chat.messages), then
        chat_template_kwargs (checked against the chat layer's allow-list), which win."""
        effort = effort_template_kwargs(self.reasoning_effort) if self.reasoning_effort else {}
        return {**effort, **check_template_kwargs(self.chat_template_kwargs)} or None

    def options(self) -> dict[str, Any]:
        opts = self.sampling_options()
        if self.budget() is not None:
            opts["max_tokens"] = self.budget()
        if self.logprobs:
            opts["logprobs"] = True
            opts["top_logprobs"] = self.top_logprobs or 0
        return opts


class CompletionRequest(SamplingFields):
    prompt: StrictStr | Annotated[list[StrictStr], Field(min_length=1, max_length=1)]
    logprobs: TopLogprobs | None = None
    echo: StrictBool = False
    suffix: StrictStr | None = None

    _no_echo = refused_when_set("echo", "echo is not supported")

    _no_suffix = refused_when_set("suffix", "suffix is not supported")

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def options(self) -> dict[str, Any]:
        opts = self.sampling_options()
        if self.max_tokens is not None:
            opts["max_tokens"] = self.max_tokens
        if self.logprobs is not None:
            opts["logprobs"] = True
            opts["top_logprobs"] = self.logprobs
        return opts


SamplingFields.model_rebuild()
