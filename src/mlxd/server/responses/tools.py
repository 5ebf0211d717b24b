"""Responses `tools`: what the model may call, flattened into the chat layer's functions.

Codex sends more than functions (codex-rs/tools/src/tool_spec.rs: `function`, `namespace`,
`custom`, `web_search`, `image_generation`, `tool_search`, `local_shell`):
  function   as it is.
  namespace  a named group of functions: each becomes a function of its own, named as
             declared (`{namespace}__{name}` when two groups, or a group and a top-level
             tool, share a name); its calls come back as `function_call` items carrying the
             group in `namespace`, as Codex looks them up.
  custom     a freeform tool (Codex's apply_patch): a function of one string argument,
             `input`, whose calls come back as `custom_tool_call` items with that input.
Tools the provider runs itself (web search, file search, code interpreter, image generation,
computer use, hosted shells, MCP, tool search) cannot run here: they are dropped, and the
server logs which; any other type is refused (400) naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, StrictBool, StrictStr, Tag

from mlxd.server.fields import MAX_TOOLS, FunctionName, RefusedKind, WireModel

__all__ = ["AnyTool", "FlatTools", "HOSTED_TYPES", "ToolOrigin", "flatten_tools"]

HOSTED_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer_use",
        "local_shell",
        "shell",
        "apply_patch",
        "mcp",
        "tool_search",
    }
)
CUSTOM_INPUT = "input"  # a custom tool's one argument


class FunctionTool(WireModel):
    type: Literal["function"]
    name: FunctionName
    description: StrictStr | None = None
    parameters: dict[StrictStr, Any] | None = None
    strict: StrictBool | None = None


class CustomTool(WireModel):
    """A freeform tool: the model writes one text (`format` says its grammar; not enforced)."""

    type: Literal["custom"]
    name: FunctionName
    description: StrictStr | None = None
    format: dict[StrictStr, Any] | None = None


class NamespaceTool(WireModel):
    type: Literal["namespace"]
    name: FunctionName
    description: StrictStr | None = None
    tools: Annotated[
        list[Annotated[FunctionTool | CustomTool, Field(discriminator="type")]],
        Field(min_length=1, max_length=MAX_TOOLS),
    ]


class HostedTool(WireModel):
    """A tool the provider runs (web_search, ...): accepted, then dropped."""

    type: StrictStr


class UnknownTool(RefusedKind):
    refusal: ClassVar[str] = (
        "tool type '{type}' is not supported: declare the tool as a function "
        "(function, namespace and custom tools are served; hosted tools such as web_search "
        "are dropped)"
    )


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("function", "namespace", "custom"):
        return str(kind)
    return "hosted" if kind in HOSTED_TYPES else "unknown"


AnyTool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[HostedTool, Tag("hosted")]
    | Annotated[UnknownTool, Tag("unknown")],
    Discriminator(_tool_kind),
]


@dataclass(frozen=True, slots=True)
class ToolOrigin:
    """Where a function the model sees comes from: its declared name, its group, its kind."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass(frozen=True, slots=True)
class FlatTools:
    functions: list[dict[str, Any]]  # the chat layer's tools
    origins: dict[str, ToolOrigin]  # by the name the model sees
    dropped: list[str]  # hosted tool types left out

    def flat_name(self, name: str, namespace: str | None) -> str:
        """The name the model sees for a declared (namespace, name): for history items."""
        for flat, origin in self.origins.items():
            if origin.name == name and origin.namespace == namespace:
                return flat
        return name


def flatten_tools(tools: Sequence[Any]) -> FlatTools:
    """Every tool as a chat-layer function (see the module docstring)."""
    members: list[tuple[FunctionTool | CustomTool, NamespaceTool | None]] = [
        (t, None) for t in tools if isinstance(t, FunctionTool | CustomTool)
    ]
    for ns_tool in (t for t in tools if isinstance(t, NamespaceTool)):
        members += [(t, ns_tool) for t in ns_tool.tools]
    counts: dict[str, int] = {}
    for tool, _ in members:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    functions, origins = [], {}
    for tool, group in members:
        ns = group.name if group is not None else None
        flat = tool.name
        if ns is not None and counts[tool.name] > 1:
            flat = f"{ns.rstrip('_')}__{tool.name}"
        origins[flat] = ToolOrigin(tool.name, ns, isinstance(tool, CustomTool))
        functions.append(_function(flat, tool, group))
    dropped = [t.type for t in tools if isinstance(t, HostedTool)]
    return FlatTools(functions, origins, dropped)


def _function(
    flat: str, tool: FunctionTool | CustomTool, group: NamespaceTool | None
) -> dict[str, Any]:
    description = tool.description or ""
    if group is not None and group.description:
        description = f"{description} ({group.name}: {group.description})".strip()
    if isinstance(tool, CustomTool):
        text = {"type": "string", "description": "the tool's whole freeform input, as text"}
        params: dict[str, Any] = {
            "type": "object",
            "properties": {CUSTOM_INPUT: text},
            "required": [CUSTOM_INPUT],
        }
    else:
        params = tool.parameters or {}
    # OpenAI's key order: templates that dump whole tools (Granite) render the same prompt.
    fn: dict[str, Any] = {"name": flat, **({"description": description} if description else {})}
    return {"type": "function", "function": {**fn, "parameters": params}}
