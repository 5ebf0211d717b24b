"""ToolChoice: what a request lets the model do with its tools, whichever API spelled it.

The prompt says what a choice asks for (the template sees no tools under NONE, only the named
one under NAMED; a forced choice adds a line to the system prompt), and a forced call is
enforced by a grammar where the model's tool format allows (chat.constraints).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mlxd.errors import InvalidRequest

__all__ = ["REQUIRED_HINT", "NAMED_HINT", "ToolChoice", "ToolChoiceMode", "with_system_hint"]

REQUIRED_HINT = "You must answer by calling one of the provided tools."
NAMED_HINT = "You must answer by calling the tool `{name}`."


class ToolChoiceMode(StrEnum):
    AUTO = "auto"  # call a tool or answer
    NONE = "none"  # the template never sees the tools, so the model cannot call them
    REQUIRED = "required"  # call one of the tools
    NAMED = "named"  # call this one tool (the template sees only it)


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str | None = None  # NAMED: the tool's name

    @classmethod
    def named(cls, name: str) -> ToolChoice:
        return cls(ToolChoiceMode.NAMED, name)

    @classmethod
    def parse(cls, value: object) -> ToolChoice:
        """OpenAI's spelling: None, "none", "auto", "required" or {"type": "function",
        "function": {"name": ...}}. Raises InvalidRequest(param="tool_choice")."""
        if value is None or value == "auto":
            return cls()
        if value in ("none", "required"):
            return cls(ToolChoiceMode(value))
        fn = value.get("function") if isinstance(value, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            raise InvalidRequest(
                "tool_choice must be 'none', 'auto', 'required' or "
                "{'type': 'function', 'function': {'name': ...}}",
                param="tool_choice",
            )
        return cls.named(name)

    def wire(self) -> str | dict[str, Any]:
        """OpenAI's spelling of this choice (what `parse` reads back)."""
        if self.mode is ToolChoiceMode.NAMED:
            return {"type": "function", "function": {"name": self.name}}
        return self.mode.value

    def forced(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The tools one of which must be called ([] when nothing is forced). Raises
        InvalidRequest(param="tool_choice") for a choice the tools cannot satisfy."""
        if self.mode in (ToolChoiceMode.AUTO, ToolChoiceMode.NONE):
            return []
        if self.mode is ToolChoiceMode.REQUIRED:
            if not tools:
                raise InvalidRequest("tool_choice 'required' needs tools", param="tool_choice")
            return list(tools)
        named = [t for t in tools or [] if t["function"]["name"] == self.name]
        if not named:
            raise InvalidRequest(
                f"tool_choice names '{self.name}', which is not in tools", param="tool_choice"
            )
        return named

    def apply(
        self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """(messages, tools) as the template gets them under this choice: the tools it may
        see, and a forced choice's hint in the first system message (or a new one). The
        caller's messages are not changed."""
        out = list(messages)
        if self.mode is ToolChoiceMode.NONE:
            return out, None
        if self.mode is ToolChoiceMode.REQUIRED:
            out = with_system_hint(out, REQUIRED_HINT)
        elif self.mode is ToolChoiceMode.NAMED and tools:
            tools = [t for t in tools if t["function"]["name"] == self.name]
            out = with_system_hint(out, NAMED_HINT.format(name=self.name))
        return out, tools


def with_system_hint(messages: Sequence[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """`messages` with `hint` at the end of the first system message (or in a new one)."""
    out = list(messages)
    if out and out[0]["role"] in ("system", "developer"):
        first = out[0]
        out[0] = {**first, "content": f"{first.get('content', '')}\n\n{hint}".strip()}
    else:
        out.insert(0, {"role": "system", "content": hint})
    return out
