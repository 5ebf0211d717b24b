"""Tool calls written as JSON objects: Hermes, Llama 3, Phi-4-mini, Nemotron, Granite,
Command-R (which names the fields tool_name/parameters) and Mistral (mlx-lm's parser)."""

from __future__ import annotations

import json
from typing import Any

from mlxd.chat.json_text import loads_json

__all__ = ["call_from_object", "parse_json_call", "parse_llama3", "parse_mistral"]

_NAME_KEYS = ("name", "tool_name")  # Command-R writes tool_name
_ARGUMENT_KEYS = ("arguments", "parameters")  # Llama 3 and Command-R write parameters


def parse_json_call(text: str) -> list[dict[str, Any]]:
    """One {"name": ..., "arguments"|"parameters": {...}} object, or a list of them. Raises
    ValueError when the text is no call."""
    try:
        payload = loads_json(text.strip())
    except json.JSONDecodeError as e:
        raise ValueError(f"tool call is not valid JSON: {e.msg}") from None
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise ValueError("empty tool call list")
    return [call_from_object(item) for item in items]


def parse_mistral(text: str) -> list[dict[str, Any]]:
    from mlx_lm.tool_parsers import mistral  # mlx-lm's parser handles both Mistral spellings

    try:
        result = mistral.parse_tool_call(text.strip())
    except RecursionError:
        raise ValueError("tool call is nested too deeply") from None
    return [call_from_object(c) for c in (result if isinstance(result, list) else [result])]


def parse_llama3(text: str) -> list[dict[str, Any]]:
    # Llama 3.1 may separate several calls with ';'.
    body = text.strip()
    try:
        return parse_json_call(body)
    except ValueError:
        parts = [p for p in body.split(";") if p.strip()]
        if len(parts) < 2:
            raise
        return [c for p in parts for c in parse_json_call(p)]


def call_from_object(item: object) -> dict[str, Any]:
    """{"name", "arguments": dict[, "id"]} from one parsed call object (ValueError if none)."""
    if not isinstance(item, dict):
        raise ValueError("tool call needs a string 'name'")
    name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
    if name is None:
        raise ValueError("tool call needs a string 'name'")
    args: object = next((item[k] for k in _ARGUMENT_KEYS if k in item), {})
    if isinstance(args, str):
        try:
            args = loads_json(args)
        except json.JSONDecodeError as e:
            raise ValueError(f"tool call arguments are not JSON: {e.msg}") from None
    if not isinstance(args, dict):
        raise ValueError("tool call arguments must be an object")
    call: dict[str, Any] = {"name": name, "arguments": args}
    if isinstance(item.get("id"), str):
        call["id"] = item["id"]
    return call
