"""One call with rich arguments (non-ASCII text, quotes, a backslash, nested JSON) as the
JSON and the XML-like families write it. Each script is one chunk spelled in the byte-level
alphabet, so the tiny tokenizer's added token decodes to the real UTF-8 text."""

from __future__ import annotations

import json
from typing import Any

from tests.vendor_family import DS, DS_END, DS_SEP

RICH: dict[str, Any] = {
    "city": "Zürich ✓ 東京",
    "note": 'say "hi" \\ back',
    "nested": {"a": [1, {"b": "c"}], "ok": True},
}
RICH_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "save_note",
            "description": "Save a note about a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "note": {"type": "string"},
                    "nested": {"type": "object"},
                },
                "required": ["city", "note", "nested"],
            },
        },
    }
]


def _raw(value: Any) -> str:
    """A value as XML-like syntaxes write it: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


RICH_ITEMS = list(RICH.items())
_JSON = json.dumps(RICH, ensure_ascii=False)
_CALL = json.dumps({"name": "save_note", "arguments": RICH}, ensure_ascii=False)
_QWEN = "".join(f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in RICH.items())
_SEED = "".join(f"<parameter={k}>{_raw(v)}</parameter>\n" for k, v in RICH.items())
_GLM = "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{_raw(v)}</arg_value>" for k, v in RICH_ITEMS)
_MINIMAX = "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in RICH.items())


def byte_level(text: str) -> str:
    """`text` in the byte-level BPE alphabet (each UTF-8 byte as its stand-in character)."""
    from mlx_lm.tokenizer_utils import _byte_decoder

    stand_in = {b: c for c, b in _byte_decoder().items()}
    return "".join(stand_in[b] for b in text.encode("utf-8"))


RICH_CALLS = {
    name: [byte_level(text)]
    for name, text in {
        "Hermes-3-Llama-3.1-8B-tool_use": f"<tool_call>\n{_CALL}\n</tool_call>",
        "NVIDIA-Nemotron-Nano-v2": f"<TOOLCALL>[{_CALL}]</TOOLCALL>",
        "DeepSeek-V3.1": DS[0] + DS[2] + "save_note" + DS_SEP + _JSON + DS_END + DS[1],
        "Mistral-Small-3.2-24B-Instruct-2506": "[TOOL_CALLS]save_note[ARGS]" + _JSON,
        "Qwen3-Coder": f"<tool_call>\n<function=save_note>\n{_QWEN}</function>\n</tool_call>",
        "ByteDance-Seed-OSS": f"<seed:tool_call>\n<function=save_note>\n{_SEED}</function>\n"
        + "</seed:tool_call>",
        "GLM-4.6": f"<tool_call>save_note{_GLM}\n</tool_call>",
        "MiniMax-M2": f'<minimax:tool_call>\n<invoke name="save_note">\n{_MINIMAX}</invoke>\n'
        + "</minimax:tool_call>",
    }.items()
}
