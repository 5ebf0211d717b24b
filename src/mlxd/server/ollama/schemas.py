"""Wire schemas of Ollama's API (pydantic): /api/chat, /api/generate, /api/show.

Field names are Ollama's (docs/api.md of ollama/ollama; the `ollama` Python client's
_types.py). `options` go through one table (OLLAMA_OPTIONS) onto the chat layer's option
names, so their bounds are chat.options.OPTIONS'; options that tune Ollama's runner (num_gpu,
num_thread, mirostat...) are accepted and have no effect. A field mlxd cannot honour
(`template`, `context`) is refused by name, never dropped; `suffix` needs a model with
fill-in-the-middle tokens (server/ollama/fill_in.py). `stream` defaults to
true, as in Ollama.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)

from mlxd.chat.messages import effort_template_kwargs
from mlxd.chat.tool_choice import ToolChoice
from mlxd.config import parse_duration
from mlxd.server.fields import (
    MAX_MESSAGES,
    MAX_TOOLS,
    FunctionName,
    ModelName,
    Number,
    StopList,
    StopText,
    WireModel,
    refused_when_set,
)
from mlxd.server.ollama.inputs import chat_messages, format_option, generate_messages

# Ollama's option name -> the chat layer's (chat.options.OPTIONS); values are checked there.
OLLAMA_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "num_predict": "max_tokens",
    "repeat_penalty": "repetition_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "ignore_eos": "ignore_eos",  # mlxd's extension, as on /v1
}
# For errors: the chat option -> the field an Ollama client sent.
OPTION_FIELDS: Mapping[str, str] = {
    **{chat: f"options.{ollama}" for ollama, chat in OLLAMA_OPTIONS.items()},
    "response_format": "format",
}
LATEST = ":latest"

Think = StrictBool | Literal["low", "medium", "high"]
# "" or "json" or a JSON schema (an object); the schema is checked when it compiles.
Format = Literal["", "json"] | dict[str, Any]


def served_name(name: str) -> str:
    """An Ollama `name:tag` as the model the server knows: `:latest` is the default tag, so it
    is dropped; other tags stay (an operator's `--alias 'qwen3:*=default'` can map them)."""
    return name.removesuffix(LATEST)


def keep_alive_seconds(value: object) -> float:
    """Ollama's keep_alive in seconds: a number of seconds or a duration ("5m", "1h30m");
    negative means forever (math.inf). Raises ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("keep_alive must be a number of seconds or a duration such as 5m")
    if isinstance(value, str):
        text = value.strip()
        forever = text.startswith("-")
        seconds = parse_duration(text[1:] if forever else text)
    else:
        seconds = float(value)
        forever = seconds < 0
    if not math.isfinite(seconds):
        raise ValueError("keep_alive must be a number of seconds or a duration such as 5m")
    return math.inf if forever else seconds


class OllamaOptions(WireModel):
    """Ollama's `options`: the ones OLLAMA_OPTIONS maps, and num_ctx (the model's window is
    always whole: a larger num_ctx is clamped to it, a smaller one does not shrink it)."""

    temperature: Number | None = None
    top_p: Number | None = None
    top_k: StrictInt | None = None
    min_p: Number | None = None
    seed: StrictInt | None = None
    stop: StopText | StopList | None = None
    num_predict: StrictInt | None = None
    repeat_penalty: Number | None = None
    repeat_last_n: StrictInt | None = None
    presence_penalty: Number | None = None
    frequency_penalty: Number | None = None
    ignore_eos: StrictBool | None = None
    num_ctx: Annotated[StrictInt, Field(ge=1)] | None = None

    def chat_options(self) -> dict[str, Any]:
        """The set options under the chat layer's names; num_predict < 0 (Ollama's "no
        limit") leaves max_tokens to the server's policy."""
        out: dict[str, Any] = {}
        for name, option in OLLAMA_OPTIONS.items():
            value = getattr(self, name)
            if value is None or (name == "num_predict" and value < 0):
                continue
            out[option] = [value] if name == "stop" and isinstance(value, str) else value
        return out


class ToolFunctionCall(WireModel):
    name: FunctionName
    arguments: dict[str, Any] = Field(default_factory=dict)


class OllamaToolCall(WireModel):
    function: ToolFunctionCall


class OllamaMessage(WireModel):
    """One message: text, base64 `images` (user turns, vision models), an assistant's
    `thinking` and `tool_calls`, a tool result's `tool_name`."""

    role: Literal["system", "user", "assistant", "tool"]
    content: StrictStr | None = None  # none: "" (an assistant turn of tool calls only)
    images: Annotated[list[StrictStr], Field(max_length=64)] | None = None
    thinking: StrictStr | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: StrictStr | None = None


class OllamaFunction(WireModel):
    name: FunctionName
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None


class OllamaTool(WireModel):
    type: Literal["function"] = "function"
    function: OllamaFunction


class OllamaRequest(WireModel):
    """What /api/chat and /api/generate share."""

    OPTION_FIELDS: ClassVar[Mapping[str, str]] = OPTION_FIELDS
    model: ModelName
    stream: StrictBool = True
    format: Format | None = None
    sampling: OllamaOptions | None = Field(default=None, alias="options")
    think: Think | None = None
    # Seconds the model stays loaded after this request (math.inf: no TTL), as Ollama's
    # keep_alive ("5m", "1h30m", 300, -1); None: the server's TTL.
    keep_alive: float | None = Field(default=None, allow_inf_nan=True)

    @field_validator("model")
    @classmethod
    def _served(cls, v: str) -> str:
        return served_name(v)

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _duration(cls, v: object) -> float | None:
        return None if v is None else keep_alive_seconds(v)

    def options(self) -> dict[str, Any]:
        """`options` and `format` as the chat layer's options."""
        opts = self.sampling.chat_options() if self.sampling is not None else {}
        fmt = format_option(self.format)
        if fmt is not None:
            opts["response_format"] = fmt
        return opts

    def template_kwargs(self) -> dict[str, Any] | None:
        """`think` as the template switch reasoning templates read."""
        if isinstance(self.think, str):  # a level: GPT-OSS's reasoning_effort, thinking on
            return effort_template_kwargs(self.think)
        return None if self.think is None else {"enable_thinking": self.think}

    def chat_tool_choice(self) -> ToolChoice:
        return ToolChoice()


class OllamaChatRequest(OllamaRequest):
    """/api/chat; no messages: load the model and answer done_reason "load" (as Ollama)."""

    messages: Annotated[list[OllamaMessage], Field(max_length=MAX_MESSAGES)] = Field(
        default_factory=list
    )
    tools: Annotated[list[OllamaTool], Field(max_length=MAX_TOOLS)] | None = None

    def chat_messages(self) -> list[dict[str, Any]]:
        return chat_messages([m.model_dump(exclude_none=True) for m in self.messages])

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None


class OllamaGenerateRequest(OllamaRequest):
    """/api/generate: `prompt` (+ `system`, `images`) through the chat template, or as is
    with `raw`; no prompt: load the model (done_reason "load")."""

    prompt: StrictStr = ""
    system: StrictStr | None = None
    raw: StrictBool = False
    images: Annotated[list[StrictStr], Field(max_length=64)] | None = None
    suffix: StrictStr | None = None  # fill-in-the-middle (with `prompt` before it)
    template: StrictStr | None = None
    context: list[StrictInt] | None = None

    _no_template = refused_when_set(
        "template", "template is not supported (the model's own chat template is used)"
    )

    _no_context = refused_when_set(
        "context", "context is not supported; send the conversation to /api/chat"
    )

    def chat_messages(self) -> list[dict[str, Any]]:
        return generate_messages(self.prompt, self.system, self.images)

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return None


class ShowRequest(WireModel):
    """/api/show; `name` is the field's older spelling."""

    model: ModelName | None = None
    name: ModelName | None = None
    verbose: StrictBool = False

    def served(self) -> str | None:
        name = self.model or self.name
        return served_name(name) if name is not None else None


class OllamaEmbedRequest(OllamaRequest):
    """/api/embed: `input` a string or a list of them; `truncate` (default true, as Ollama)
    cuts an input longer than the model's window instead of refusing it."""

    input: StrictStr | list[StrictStr]
    truncate: StrictBool = True
    dimensions: Annotated[StrictInt, Field(ge=1, le=1 << 16)] | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


class OllamaEmbeddingsRequest(OllamaRequest):
    """/api/embeddings, Ollama's older endpoint: one `prompt`, one vector."""

    prompt: StrictStr
