"""Ollama's messages, prompts and `format` in the chat layer's (OpenAI-shaped) terms.

Ollama's tool calls carry no ids and its tool results name the tool (`tool_name`) instead:
each call gets an id here, and each tool result answers the first unanswered call of its
tool (or the first unanswered call), so templates see the pairs OpenAI's shape has.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from mlxd.chat.images import data_url
from mlxd.errors import InvalidRequest


def format_option(fmt: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """Ollama's `format` as the chat layer's response_format: "json" is any JSON object, an
    object is a JSON schema; "" or none is free text."""
    if not fmt:
        return None
    if fmt == "json":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": fmt}}


def image_parts(images: Sequence[str], param: str) -> list[dict[str, Any]]:
    """Base64 images as image_url parts (data: URLs, their type sniffed from the bytes)."""
    parts = []
    for i, text in enumerate(images):
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("images must be base64 strings", param=f"{param}.{i}") from None
        parts.append({"type": "image_url", "image_url": {"url": data_url(data)}})
    return parts


def _content(text: str, images: Sequence[str] | None, param: str) -> str | list[dict[str, Any]]:
    if not images:
        return text
    # The pictures first, then the question: where llava-style templates put them.
    return [*image_parts(images, f"{param}.images"), {"type": "text", "text": text}]


def chat_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dumped OllamaMessages as the chat layer's messages."""
    pending: list[tuple[str, str]] = []  # (call id, tool name) not yet answered
    count = 0
    out = []
    for i, m in enumerate(messages):
        msg: dict[str, Any] = {
            "role": m["role"],
            "content": _content(m.get("content") or "", m.get("images"), f"messages.{i}"),
        }
        if m.get("thinking") and m["role"] == "assistant":
            msg["reasoning_content"] = m["thinking"]
        calls = []
        for call in m.get("tool_calls") or []:
            count += 1
            call_id = f"call_{count}"
            pending.append((call_id, call["function"]["name"]))
            calls.append({"id": call_id, "type": "function", "function": call["function"]})
        if calls:
            msg["tool_calls"] = calls
        if m["role"] == "tool":
            msg["tool_call_id"] = _answered(pending, m.get("tool_name"))
            if m.get("tool_name"):
                msg["name"] = m["tool_name"]
        out.append(msg)
    return out


def _answered(pending: list[tuple[str, str]], name: str | None) -> str:
    """The id of the call a tool result answers, taken off `pending`."""
    for k, (call_id, tool) in enumerate(pending):
        if name is None or tool == name:
            del pending[k]
            return call_id
    if pending:
        return pending.pop(0)[0]
    return "call_0"  # a result with no call before it: the template decides what it shows


def generate_messages(
    prompt: str, system: str | None, images: Sequence[str] | None
) -> list[dict[str, Any]]:
    """/api/generate's prompt (and system prompt, images) as a conversation of one turn."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    out.append({"role": "user", "content": _content(prompt, images, "")})
    return out
