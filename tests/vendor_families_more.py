"""Vendor families added in session 9 (see tests/vendor_families.py, which lists them all)."""

from __future__ import annotations

import json
from typing import Any

from tests.vendor_family import (
    CALLS_TWO,
    DS,
    DS_END,
    DS_SEP,
    LLAMA_SPECIAL,
    LLAMA_TWO,
    LLAMA_WEATHER,
    THOUGHT,
    TIME,
    WEATHER,
    Family,
    args_json,
    call_json,
    qwen_call,
)

_HERMES_ONE = ["<tool_call>", "\n" + call_json("get_weather", WEATHER) + "\n", "</tool_call>"]
_HERMES_TWO = [*_HERMES_ONE, "\n<tool_call>\n" + call_json("get_time", TIME) + "\n</tool_call>"]
_QWEN_CODER_ONE = ["<tool_call>", qwen_call("get_weather", WEATHER), "</tool_call>"]
MORE = [
    Family(
        "Qwen3-0.6B",  # Hermes JSON calls; reasoning unless enable_thinking is false
        "hermes",
        _HERMES_ONE,
        _HERMES_TWO,
        ["<think>", THOUGHT, "</think>", "Sunny."],
        quiet_kwargs={"enable_thinking": False},
        call_marker='<tool_call>\n{"name": "get_weather"',
        enforced=True,
    ),
    Family(
        "Qwen3-Coder",
        "qwen3_coder",
        _QWEN_CODER_ONE,
        [*_QWEN_CODER_ONE, "\n<tool_call>" + qwen_call("get_time", TIME) + "</tool_call>"],
        None,
        call_marker="<tool_call>\n<function=get_weather>",
        enforced=True,
    ),
    Family(
        "Llama-3.2-3B-Instruct",  # tools in the first user message; one call per turn
        "llama3",
        [LLAMA_WEATHER],
        [LLAMA_TWO],
        None,
        call_marker='{"name": "get_weather", "parameters": ',
        enforced=True,
        special=LLAMA_SPECIAL,  # its template spells no tool marker: the vocabulary tells
    ),
]


def _ds_v3_call(name: str, args: dict[str, Any]) -> str:
    return DS[2] + "function" + DS_SEP + name + "\n```json\n" + args_json(args) + "\n```" + DS_END


MORE.append(
    Family(
        "DeepSeek-R1-Distill-Qwen-32B",  # V3 call spelling; the template never shows tools
        "deepseek",
        [DS[0], _ds_v3_call("get_weather", WEATHER), DS[1]],
        [DS[0], _ds_v3_call("get_weather", WEATHER), "\n" + _ds_v3_call("get_time", TIME), DS[1]],
        [THOUGHT, "</think>", "Sunny."],  # the prompt always opens <think>
        call_marker=DS[0] + DS[2] + "function" + DS_SEP + "get_weather",
        enforced=True,
        lead=("</think>",),
        result_lead=(),  # after tool outputs its prompt opens no <think>
    )
)


def _harmony_call(name: str) -> str:
    head = f"<|start|>assistant<|channel|>commentary to=functions.{name}"
    return head + " <|constrain|>json<|message|>"


# GPT-OSS's vocabulary has the harmony tokens (EOS stays the scripts' <|im_end|>).
HARMONY_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|start|>", "<|channel|>")
HARMONY_SPECIAL += ("<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")
MORE.append(
    Family(
        "gpt-oss-120b",
        "harmony",
        ["<|channel|>", "commentary to=functions.get_weather <|constrain|>json", "<|message|>"]
        + [args_json(WEATHER), "<|call|>"],
        ["<|channel|>", "commentary to=functions.get_weather <|constrain|>json", "<|message|>"]
        + [
            args_json(WEATHER),
            "<|call|>",
            _harmony_call("get_time") + args_json(TIME) + "<|call|>",
        ],
        ["<|channel|>", "analysis", "<|message|>", THOUGHT, "<|end|>"]
        + ["<|start|>assistant<|channel|>final<|message|>", "Sunny."],
        call_marker="<|start|>assistant to=functions.get_weather<|channel|>commentary json",
        enforced=True,
        answer_tags=("<|channel|>final<|message|>", "<|return|>"),
        special=HARMONY_SPECIAL,
    )
)


# Mistral's tekken vocabularies have the control tokens (EOS stays the scripts' <|im_end|>).
MISTRAL_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "[TOOL_CALLS]", "[INST]")
MISTRAL_SPECIAL += ("[/INST]",)
MORE += [
    Family(
        "Mistral-Small-3.1-24B-Instruct-2503",  # a JSON list after [TOOL_CALLS]
        "mistral",
        ["[TOOL_CALLS]", "[" + call_json("get_weather", WEATHER) + "]"],
        ["[TOOL_CALLS]", "[" + ", ".join(call_json(n, a) for n, a in CALLS_TWO) + "]"],
        None,
        call_marker='[TOOL_CALLS] [{"name": "get_weather"',
        enforced=True,
        special=MISTRAL_SPECIAL,
    ),
    Family(
        "Mistral-Small-3.2-24B-Instruct-2506",  # [TOOL_CALLS]NAME[ARGS]{json}, repeated
        "mistral",
        ["[TOOL_CALLS]", "get_weather", "[ARGS]", args_json(WEATHER)],
        ["[TOOL_CALLS]", "get_weather", "[ARGS]", args_json(WEATHER)]
        + ["[TOOL_CALLS]get_time[ARGS]" + args_json(TIME)],
        None,
        call_marker="[TOOL_CALLS]get_weather[CALL_ID]",
        enforced=True,
        special=(*MISTRAL_SPECIAL, "[ARGS]", "[CALL_ID]"),
    ),
]


# Gemma 4's vocabulary has its turn, channel and tool tokens (EOS stays the scripts' <|im_end|>).
GEMMA4_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|turn>", "<turn|>")
GEMMA4_SPECIAL += ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>')
GEMMA4_SPECIAL += ("<|tool>", "<tool|>", "<|think|>")
_GEMMA4_WEATHER = 'call:get_weather{city:<|"|>Paris<|"|>,days:3}'
MORE.append(
    Family(
        "gemma4",  # call:NAME{key:<|"|>text<|"|>,...}; the prompt closes an empty thought
        "gemma4",
        ["<|tool_call>", _GEMMA4_WEATHER, "<tool_call|>"],
        ["<|tool_call>", _GEMMA4_WEATHER, "<tool_call|>"]
        + ['<|tool_call>call:get_time{zone:<|"|>UTC<|"|>}<tool_call|>'],
        ["<|channel>", "thought", THOUGHT, "<channel|>", "Sunny."],
        thinking_kwargs={"enable_thinking": True},
        call_marker="<|tool_call>" + _GEMMA4_WEATHER + "<tool_call|>",
        enforced=True,
        special=GEMMA4_SPECIAL,
    )
)


def _action(*calls: tuple[str, dict[str, Any]]) -> str:
    items = [{"tool_name": n, "parameters": a} for n, a in calls]
    return "\n```json\n" + json.dumps(items, indent=4) + "\n```"


MORE.append(
    Family(
        "command-r-plus-tool_use",  # Action: then a fenced JSON list (the older Command R+)
        "command_r_plus",
        ["Action:", _action(("get_weather", WEATHER))],
        ["Action:", _action(*CALLS_TWO)],
        None,
        call_marker='"tool_name": "get_weather",',
        enforced=True,
    )
)
