"""Content blocks of Anthropic's Messages API (text, images, tool use and results, thinking)
and the messages that hold them; strict like every wire schema (mlxd.server.fields)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictBool, StrictStr

from mlxd.chat.messages import join_text
from mlxd.server.fields import (
    CallId,
    RefusedKind,
    WireModel,
)

ToolName = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_\-]{1,128}$")]  # Anthropic's rule
MAX_BLOCKS = 10_000  # content blocks in one message


class TextBlock(WireModel):
    type: Literal["text"]
    text: StrictStr


class ToolUseBlock(WireModel):
    """A call the model made (assistant turns)."""

    type: Literal["tool_use"]
    id: CallId
    name: ToolName
    input: dict[StrictStr, Any]


class Base64Source(WireModel):
    type: Literal["base64"]
    media_type: Annotated[StrictStr, Field(pattern=r"^image/[A-Za-z0-9.+\-]{1,64}$")]
    data: StrictStr


class UrlSource(WireModel):
    type: Literal["url"]
    url: Annotated[StrictStr, Field(min_length=1)]


class ImageBlock(WireModel):
    """An image in a user turn (a vision model's; the chat layer reads and checks it)."""

    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI image_url part the chat layer takes (base64 as a data: URL)."""
        src = self.source
        url = src.url if isinstance(src, UrlSource) else f"data:{src.media_type};base64,{src.data}"
        return {"type": "image_url", "image_url": {"url": url}}


ResultPart = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(WireModel):
    """The client's answer to a tool_use of the previous assistant turn (user turns)."""

    type: Literal["tool_result"]
    tool_use_id: CallId
    content: StrictStr | Annotated[list[ResultPart], Field(max_length=MAX_BLOCKS)] = ""
    is_error: StrictBool = False

    @property
    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(
            isinstance(b, ImageBlock) for b in self.content
        )

    def text(self) -> str:
        """The result as the `tool` message's text (tool turns carry no images)."""
        content = self.content
        text = (
            content
            if isinstance(content, str)
            else join_text(b.text for b in content if isinstance(b, TextBlock))
        )
        return f"Error: {text}" if self.is_error else text


class ThinkingBlock(WireModel):
    """Earlier reasoning sent back (assistant turns); the signature is not checked."""

    type: Literal["thinking"]
    thinking: StrictStr
    signature: StrictStr | None = None


class RedactedThinkingBlock(WireModel):
    type: Literal["redacted_thinking"]
    data: StrictStr


class UnsupportedBlock(RefusedKind):
    """Block kinds mlxd cannot take: refused, never dropped."""

    refusal: ClassVar[str] = "'{type}' content blocks are not supported"
    type: Literal["document", "search_result", "container_upload"]


ContentBlock = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | UnsupportedBlock,
    Field(discriminator="type"),
]


class MessageParam(WireModel):
    # "system": instructions mid-conversation, as Claude Code sends them (text blocks only)
    role: Literal["user", "assistant", "system"]
    content: StrictStr | Annotated[list[ContentBlock], Field(max_length=MAX_BLOCKS)]

    def blocks(self) -> list[ContentBlock]:
        if isinstance(self.content, str):
            return [TextBlock(type="text", text=self.content)]
        return list(self.content)
