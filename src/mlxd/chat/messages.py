"""Validate OpenAI-shaped messages and tools, and normalize them for chat templates.

Text content parts are joined into one string (templates differ in what they accept; every
template accepts a string); a message with images keeps its parts, each image as
`{"type": "image"}` (what vision templates iterate). Tool-call arguments become objects (HF
templates apply `tojson` to them; `ToolArguments` also joins strings as its JSON text, which
DeepSeek's template writes), and `developer` becomes `system` (few templates know the
developer role).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from mlxd.chat.images import ImageRef, image_url
from mlxd.chat.json_text import JsonTooDeep, loads_json
from mlxd.config import LIMITS
from mlxd.errors import InvalidRequest

__all__ = [
    "TEMPLATE_KWARGS_ALLOWED",
    "IMAGE_PART_TYPES",
    "ToolArguments",
    "check_template_kwargs",
    "image_refs",
    "join_text",
    "normalize_messages",
    "normalize_tools",
    "effort_template_kwargs",
    "nine_char_call_ids",
]

ROLES = ("system", "developer", "user", "assistant", "tool")
IMAGE_PART_TYPES = ("image_url",)  # OpenAI's image content part

# chat_template_kwargs a request may set: switches templates read, never ones that rename
# the template or change tokenization (chat_template, tokenize, add_special_tokens, ...).
TEMPLATE_KWARGS_ALLOWED = frozenset(
    {"enable_thinking", "thinking", "reasoning_effort", "thinking_budget", "reasoning"}
)
# OpenAI's reasoning efforts as GPT-OSS's levels (its template reads `reasoning_effort`).
_EFFORT_LEVEL = {"none": "low", "minimal": "low", "low": "low", "medium": "medium",
                 "high": "high", "xhigh": "high"}  # fmt: skip


def effort_template_kwargs(effort: str) -> dict[str, Any]:
    """A reasoning effort (OpenAI's reasoning_effort, Responses' reasoning.effort, Ollama's
    think level) as the switches reasoning templates read: `reasoning_effort` (GPT-OSS:
    low/medium/high; it cannot stop reasoning, so none/minimal are low), `enable_thinking`
    (Qwen3 and others: "none"/"minimal" turn thinking off) and `thinking` (the same switch as
    Granite 3.3 and DeepSeek V3.1 name it)."""
    level = _EFFORT_LEVEL.get(effort)
    if level is None:
        raise InvalidRequest(f"unknown reasoning effort {effort!r}", param="reasoning_effort")
    thinking = effort not in ("none", "minimal")
    return {"reasoning_effort": level, "enable_thinking": thinking, "thinking": thinking}


def normalize_messages(messages: object) -> list[dict[str, Any]]:
    """Return template-ready copies of `messages`; raise InvalidRequest(param=...) if malformed."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list", param="messages")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def normalize_tools(tools: object) -> list[dict[str, Any]] | None:
    """Validate OpenAI function tools; None or [] means no tools."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequest("tools must be a list", param="tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise InvalidRequest("each tool must be {'type': 'function', ...}", param=where)
        fn = tool.get("function")
        if not isinstance(fn, Mapping) or not _is_name(fn.get("name")):
            raise InvalidRequest("tool function needs a non-empty string name", param=where)
        params = fn.get("parameters", {})
        if not isinstance(params, Mapping):
            raise InvalidRequest("tool parameters must be a JSON schema object", param=where)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise InvalidRequest("tool description must be a string", param=where)
        out.append({"type": "function", "function": dict(fn)})
    return out or None


def check_template_kwargs(kwargs: object) -> dict[str, Any]:
    """Allow-listed chat_template_kwargs with JSON scalar values; others are InvalidRequest."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise InvalidRequest("chat_template_kwargs must be an object", param="chat_template_kwargs")
    for key, value in kwargs.items():
        if key not in TEMPLATE_KWARGS_ALLOWED:
            allowed = ", ".join(sorted(TEMPLATE_KWARGS_ALLOWED))
            raise InvalidRequest(
                f"chat_template_kwargs {key!r} is not allowed (allowed: {allowed})",
                param=f"chat_template_kwargs.{key}",
            )
        too_long = isinstance(value, str) and len(value) > LIMITS["template_kwarg_chars"]
        if too_long or (value is not None and not isinstance(value, bool | int | float | str)):
            raise InvalidRequest(
                f"chat_template_kwargs {key!r} must be a boolean, a number or a string of at "
                f"most {LIMITS['template_kwarg_chars']} characters",
                param=f"chat_template_kwargs.{key}",
            )
    return dict(kwargs)


def _message(m: object, where: str) -> dict[str, Any]:
    if not isinstance(m, Mapping):
        raise InvalidRequest("each message must be an object", param=where)
    role = m.get("role")
    if role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", param=f"{where}.role")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role}
    content = _content(m.get("content"), f"{where}.content", role)
    tool_calls = m.get("tool_calls")
    if tool_calls is not None and role != "assistant":
        raise InvalidRequest("only assistant messages carry tool_calls", param=f"{where}")
    if tool_calls:
        out["tool_calls"] = _tool_calls(tool_calls, f"{where}.tool_calls")
    if content is None and not (role == "assistant" and tool_calls):
        raise InvalidRequest("message content is required", param=f"{where}.content")
    out["content"] = content if content is not None else ""
    if role == "tool":
        tcid = m.get("tool_call_id")
        if not isinstance(tcid, str) or not tcid:
            raise InvalidRequest("tool messages need a tool_call_id", param=f"{where}.tool_call_id")
        out["tool_call_id"] = tcid
    reasoning = m.get("reasoning_content")
    if reasoning is not None and role == "assistant":
        # Earlier reasoning sent back by the client; templates such as Qwen3's render it.
        if not isinstance(reasoning, str):
            raise InvalidRequest(
                "reasoning_content must be a string", param=f"{where}.reasoning_content"
            )
        out["reasoning_content"] = reasoning
    name = m.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise InvalidRequest("name must be a string", param=f"{where}.name")
        out["name"] = name
    return out


def _content(content: object, where: str, role: object) -> str | list[dict[str, str]] | None:
    """A string; or, when the parts hold images, the parts as templates take them
    (`{"type": "text", "text": ...}`, `{"type": "image"}`); the images themselves are read by
    `image_refs`."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or a list of parts", param=where)
    parts: list[dict[str, str]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in IMAGE_PART_TYPES:
            if role != "user":
                raise InvalidRequest("only user messages carry images", param=f"{where}[{j}]")
            image_url(part, f"{where}[{j}]")  # its URL is read later (image_refs); check it now
            parts.append({"type": "image"})
            continue
        if kind != "text":
            raise InvalidRequest(
                "content parts must be text or image_url parts", param=f"{where}[{j}]"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequest("text part needs a string 'text'", param=f"{where}[{j}].text")
        parts.append({"type": "text", "text": text})
    if any(p["type"] == "image" for p in parts):
        return parts
    return join_text(p["text"] for p in parts)


def image_refs(messages: object) -> list[ImageRef]:
    """The image parts of (raw) `messages`, in prompt order, with their request params."""
    refs: list[ImageRef] = []
    if not isinstance(messages, list):
        return refs
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                refs.append(image_url(part, f"messages[{i}].content[{j}]"))
    return refs


def join_text(parts: Iterable[str]) -> str:
    """Text content parts as the one string a template gets (every API's parts join so)."""
    return "\n".join(parts)


class ToolArguments(dict[str, Any]):
    """A tool call's arguments as a template sees them: an object, and its compact JSON text
    where a template adds it to a string (DeepSeek V3.1: `name + sep + arguments`)."""

    def __add__(self, other: object) -> str:
        if not isinstance(other, str):
            return NotImplemented
        return self.json_text() + other

    def __radd__(self, other: object) -> str:
        if not isinstance(other, str):
            return NotImplemented
        return other + self.json_text()

    def json_text(self) -> str:
        return json.dumps(self, ensure_ascii=False)


def _tool_calls(calls: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidRequest("tool_calls must be a list", param=where)
    out = []
    for j, call in enumerate(calls):
        here = f"{where}[{j}]"
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not _is_name(fn.get("name")):
            raise InvalidRequest("tool call needs function.name", param=here)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = loads_json(args) if args.strip() else {}
            except JsonTooDeep as e:
                raise InvalidRequest(
                    f"tool call arguments are {e.msg}", param=f"{here}.function.arguments"
                ) from None
            except json.JSONDecodeError:
                raise InvalidRequest(
                    "tool call arguments must be a JSON object", param=f"{here}.function.arguments"
                ) from None
        if not isinstance(args, Mapping):
            raise InvalidRequest(
                "tool call arguments must be a JSON object", param=f"{here}.function.arguments"
            )
        entry: dict[str, Any] = {
            "type": "function",
            "function": {"name": fn["name"], "arguments": ToolArguments(args)},
        }
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        out.append(entry)
    return out


def _is_name(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def nine_char_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every tool-call id (a call's `id`, a result's `tool_call_id`) spelled as
    9 alphanumeric characters, as Mistral's templates demand (3.2's raises on any other length):
    an id's last 9 alphanumerics, else a digest of it. One id maps to one spelling, so a call
    and its result still pair."""

    def nine(call_id: object) -> object:
        if not isinstance(call_id, str):
            return call_id
        alnum = "".join(c for c in call_id if c.isascii() and c.isalnum())
        return alnum[-9:] if len(alnum) >= 9 else hashlib.sha1(call_id.encode()).hexdigest()[:9]

    out = []
    for m in messages:
        m = dict(m)
        if "tool_call_id" in m:
            m["tool_call_id"] = nine(m["tool_call_id"])
        if isinstance(m.get("tool_calls"), list):
            m["tool_calls"] = [
                {**c, "id": nine(c["id"])} if "id" in c else c for c in m["tool_calls"]
            ]
        out.append(m)
    return out
