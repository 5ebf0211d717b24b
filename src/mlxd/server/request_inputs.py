"""Validated wire requests of any API -> the chat layer's ChatRequest, under the server's
policy.

Parsing is pydantic's own JSON parser (strict, no NaN); the checks here are the ones
that depend on operator settings or on several fields at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from mlxd.chat.chat_request import ChatRequest, MaxTokensPolicy
from mlxd.chat.options import ChatOptions, check_stop_count
from mlxd.chat.tool_choice import ToolChoice
from mlxd.errors import InvalidRequest
from mlxd.server.error_responses import validation_error
from mlxd.server.settings import ServerSettings
from mlxd.server.volatile_lines import without_volatile_lines

M = TypeVar("M", bound=BaseModel)


@runtime_checkable
class StopStrings(Protocol):
    """A request whose `stop` field parse checks against the operator's cap."""

    def stop_list(self) -> list[str]: ...


@runtime_checkable
class ContinuesFinalTurn(Protocol):
    """A conversation whose last message may be the assistant's, to be continued."""

    def continues_final_turn(self) -> bool: ...


class ApiConversation(Protocol):
    """What any API's parsed request holds of a conversation, in the chat layer's shapes."""

    def chat_messages(self) -> list[dict[str, Any]]: ...

    def chat_tools(self) -> list[dict[str, Any]] | None: ...

    def chat_tool_choice(self) -> ToolChoice: ...

    def template_kwargs(self) -> dict[str, Any] | None: ...


class ApiChatRequest(ApiConversation, Protocol):
    """A parsed chat request of any API (chat completions, Anthropic messages, Responses).
    OPTION_FIELDS names the API's own field for each chat option it spells differently
    (Anthropic's "output_config.format" for "response_format"), for errors."""

    OPTION_FIELDS: ClassVar[Mapping[str, str]]

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
    if isinstance(req, StopStrings):
        check_stop_count(len(req.stop_list()))
    return req


def chat_request(
    req: ApiConversation,
    settings: ServerSettings,
    options: Mapping[str, object] | None = None,
    template: str | None = None,
) -> ChatRequest:
    """The chat layer's request for any API's conversation, under the server's policy: a
    request without max_tokens generates at most half the context window, and image URLs
    are fetched only when the operator allows it, and the volatile lines agents put at the
    top of a prompt are dropped (server.volatile_lines). Raises InvalidRequest on a bad
    option."""
    return ChatRequest(
        without_volatile_lines(req.chat_messages()),
        ChatOptions.parse(options or {}),
        tools=req.chat_tools(),
        tool_choice=req.chat_tool_choice(),
        template_kwargs=req.template_kwargs(),
        reasoning=settings.reasoning or "auto",
        max_tokens_policy=MaxTokensPolicy.HALF_WINDOW,
        template=template,
        allow_image_urls=settings.allow_image_urls,
        continue_final=isinstance(req, ContinuesFinalTurn) and req.continues_final_turn(),
    )


def in_client_terms(err: InvalidRequest, fields: Mapping[str, str]) -> InvalidRequest:
    """`err` naming the field the client sent (`fields`: chat option -> the API's field) in
    its param and at the start of its message; `err` itself when it names no such option."""
    for option, field in fields.items():
        param = err.param or ""
        if param == option or param.startswith(option + "."):
            message = err.message
            if message.startswith(option):
                message = field + message[len(option) :]
            return type(err)(message, param=field + param[len(option) :])
    return err
