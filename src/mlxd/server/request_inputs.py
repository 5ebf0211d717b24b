"""Validated wire requests -> chat-layer inputs (messages, tools, template kwargs).

Parsing is pydantic's own JSON parser (strict, no NaN); the checks here are the ones
that depend on operator settings or on several fields at once.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from mlxd.chat.options import check_stop_count
from mlxd.errors import InvalidRequest
from mlxd.server.error_responses import validation_error
from mlxd.server.fields import ToolChoice, ToolChoiceSpec
from mlxd.server.openai.schemas import SamplingFields
from mlxd.server.settings import ServerSettings

M = TypeVar("M", bound=BaseModel)

REQUIRED_HINT = "You must answer by calling one of the provided tools."
NAMED_HINT = "You must answer by calling the tool `{name}`."


class ChatInputs(NamedTuple):
    """What start_chat takes from a request beyond its options, whichever API it came in."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any] | None


class ApiConversation(Protocol):
    """What any API's parsed request holds of a conversation, in the chat layer's shapes."""

    def chat_messages(self) -> list[dict[str, Any]]: ...

    def chat_tools(self) -> list[dict[str, Any]] | None: ...

    def tool_choice_spec(self) -> ToolChoiceSpec | None: ...

    def template_kwargs(self) -> dict[str, Any] | None: ...


class ApiChatRequest(ApiConversation, Protocol):
    """A parsed chat request of any API (chat completions, Anthropic messages, Responses)."""

    @property
    def model(self) -> str | None: ...

    @property
    def stream(self) -> bool: ...

    def options(self) -> dict[str, Any]: ...


def parse(model: type[M], body: bytes, settings: ServerSettings) -> M:
    """Body bytes -> request model, or InvalidRequest (400) naming the field."""
    if not body.strip():
        raise InvalidRequest("request body is empty; send a JSON object")
    try:
        req = model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if isinstance(req, SamplingFields):
        check_stop_count(len(req.stop_list()))
    return req


def chat_inputs(req: ApiConversation) -> ChatInputs:
    """(messages, tools, template_kwargs) for start_chat from any API's request, honouring
    tool_choice: the prompt says what it asks for; start_chat enforces a forced call with a
    grammar."""
    messages = req.chat_messages()
    tools = req.chat_tools()
    spec = req.tool_choice_spec()
    if spec is not None:
        tools = apply_tool_choice(messages, tools, spec.kind, spec.name)
    return ChatInputs(messages, tools, req.template_kwargs())


def apply_tool_choice(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    choice: ToolChoice,
    name: str | None = None,
) -> list[dict[str, Any]] | None:
    """The tools the template gets under `choice`; a forced choice adds its hint to messages."""
    if choice is ToolChoice.NONE:
        return None
    if choice is ToolChoice.REQUIRED:
        _add_system_hint(messages, REQUIRED_HINT)
    elif choice is ToolChoice.NAMED and tools:
        tools = [t for t in tools if t["function"]["name"] == name]
        _add_system_hint(messages, NAMED_HINT.format(name=name))
    return tools


def _add_system_hint(messages: list[dict[str, Any]], hint: str) -> None:
    """Reflect a forced tool choice in the prompt: the first system message, or a new one."""
    if messages and messages[0]["role"] in ("system", "developer"):
        messages[0]["content"] = f"{messages[0].get('content', '')}\n\n{hint}".strip()
    else:
        messages.insert(0, {"role": "system", "content": hint})
