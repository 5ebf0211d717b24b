"""Each tool-calling family as a scripted checkpoint sees it: its vendor template (tests/
templates/) and what the family's models really write for an answer, reasoning then an
answer, one call and two calls. Shared by the chat-layer and the server tests.

Script chunks are single tokens and must be distinct, so a family's second call block is one
chunk. Non-ASCII text is left to the unit tests (an added token's raw non-ASCII text decodes
to U+FFFD in mlx-lm's byte-level detokenizer; real models spell it with byte tokens).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tests.vendor_families_more import MORE
from tests.vendor_family import (
    ANSWER,
    CALLS_ONE,
    CALLS_TWO,
    DS,
    DS_END,
    DS_SEP,
    LLAMA_TWO,
    LLAMA_WEATHER,
    THOUGHT,
    TIME,
    TOOLS,
    WEATHER,
    Family,
    args_json,
    call_json,
    ds_call,
    qwen_call,
)

__all__ = [
    "ANSWER",
    "BY_NAME",
    "CALLS_ONE",
    "CALLS_TWO",
    "FAMILIES",
    "THOUGHT",
    "TIME",
    "TOOLS",
    "WEATHER",
    "Family",
]


def _seed_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
    return f"\n<function={name}>\n{params}</function>\n"


FAMILIES = [
    Family(
        "DeepSeek-V3.1",
        "deepseek",
        [DS[0], DS[2], "get_weather", DS_SEP, args_json(WEATHER), DS_END, DS[1]],
        [
            DS[0],
            DS[2],
            "get_weather",
            DS_SEP,
            args_json(WEATHER),
            DS_END,
            ds_call("get_time", TIME),
            DS[1],
        ],
        [THOUGHT, "</think>", "Sunny."],  # the prompt opens <think> when thinking is on
        thinking_kwargs={"thinking": True},
        call_marker=DS[0] + DS[2] + "get_weather" + DS_SEP,
        enforced=True,
    ),
    Family(
        "Phi-4-mini-instruct",
        "phi4",
        ["<|tool_call|>", call_json("get_weather", WEATHER), "<|/tool_call|>"],
        [
            "<|tool_call|>",
            call_json("get_weather", WEATHER),
            "<|/tool_call|>",
            "<|tool_call|>" + call_json("get_time", TIME) + "<|/tool_call|>",
        ],
        None,
        call_marker="<|tool_call|>",
        enforced=True,
    ),
    Family(
        "NVIDIA-Nemotron-Nano-v2",
        "nemotron",
        ["<TOOLCALL>", "[" + call_json("get_weather", WEATHER) + "]", "</TOOLCALL>"],
        ["<TOOLCALL>", "[" + ", ".join(call_json(n, a) for n, a in CALLS_TWO) + "]", "</TOOLCALL>"],
        [THOUGHT, "</think>", "Sunny."],  # the prompt opens <think> unless /no_think
        quiet_system=" /no_think",
        call_marker='<TOOLCALL>[{"name": "get_weather"',
        enforced=True,
    ),
    Family(
        "ByteDance-Seed-OSS",
        "seed_oss",
        ["<seed:tool_call>", _seed_call("get_weather", WEATHER), "</seed:tool_call>"],
        [
            "<seed:tool_call>",
            _seed_call("get_weather", WEATHER),
            "</seed:tool_call>",
            "<seed:tool_call>" + _seed_call("get_time", TIME) + "</seed:tool_call>",
        ],
        ["<seed:think>", THOUGHT, "</seed:think>", "Sunny."],
        call_marker="<seed:tool_call>\n<function=get_weather>",
        enforced=True,
    ),
    Family(
        "LFM2.5-8B-A1B",
        "pythonic",
        ["<|tool_call_start|>", '[get_weather(city="Paris", days=3)]', "<|tool_call_end|>"],
        [
            "<|tool_call_start|>",
            '[get_weather(city="Paris", days=3), get_time(zone="UTC")]',
            "<|tool_call_end|>",
        ],
        ["<think>", THOUGHT, "</think>", "Sunny."],
        call_marker="<|tool_call_start|>[get_weather(",
        enforced=True,
    ),
    Family(
        "Hermes-3-Llama-3.1-8B-tool_use",
        "hermes",
        ["<tool_call>", "\n" + call_json("get_weather", WEATHER) + "\n", "</tool_call>"],
        [
            "<tool_call>",
            "\n" + call_json("get_weather", WEATHER) + "\n",
            "</tool_call>",
            "\n<tool_call>\n" + call_json("get_time", TIME) + "\n</tool_call>",
        ],
        None,
        call_marker='<tool_call>\n{"name": "get_weather"',
        enforced=True,
    ),
    Family(
        "granite-3.3-2B-Instruct",
        "granite",
        ["<|tool_call|>", "[" + call_json("get_weather", WEATHER) + "]"],
        ["<|tool_call|>", "[" + ", ".join(call_json(n, a) for n, a in CALLS_TWO) + "]"],
        # Under `thinking` its template asks for <think></think> then <response></response>.
        ["<think>", THOUGHT, "</think>", "<response>", "Sunny.", "</response>"],
        thinking_kwargs={"thinking": True},
        call_marker=None,  # the template does not render earlier calls
        enforced=True,
    ),
    Family(
        "Qwen3.5-4B",
        "qwen3_coder",
        ["<tool_call>", qwen_call("get_weather", WEATHER), "</tool_call>"],
        [
            "<tool_call>",
            qwen_call("get_weather", WEATHER),
            "</tool_call>",
            "\n<tool_call>" + qwen_call("get_time", TIME) + "</tool_call>",
        ],
        [THOUGHT, "</think>", "Sunny."],  # the prompt opens <think> unless enable_thinking false
        quiet_kwargs={"enable_thinking": False},
        call_marker="<tool_call>\n<function=get_weather>",
        enforced=True,
    ),
]


def _glm_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(
        f"\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" for k, v in args.items()
    )
    return f"{name}{params}\n"


FAMILIES.append(
    Family(
        "GLM-4.6",
        "glm47",
        ["<tool_call>", _glm_call("get_weather", WEATHER), "</tool_call>"],
        [
            "<tool_call>",
            _glm_call("get_weather", WEATHER),
            "</tool_call>",
            "\n<tool_call>" + _glm_call("get_time", TIME) + "</tool_call>",
        ],
        ["<think>", THOUGHT, "</think>", "Sunny."],
        quiet_kwargs={"enable_thinking": False},
        call_marker="<tool_call>get_weather\n<arg_key>city</arg_key>",
        enforced=True,
    )
)
FAMILIES.append(
    Family(
        "Llama-3.3-70B-Instruct",  # Llama 3.1's template and syntax
        "llama3",
        [LLAMA_WEATHER],
        [LLAMA_TWO],
        None,
        call_marker='{"name": "get_weather", "parameters": ',
        enforced=True,
    )
)


def _minimax_invoke(name: str, args: dict[str, Any]) -> str:
    params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in args.items())
    return f'\n<invoke name="{name}">\n{params}</invoke>\n'


FAMILIES.append(
    Family(
        "MiniMax-M2",
        "minimax_m2",
        ["<minimax:tool_call>", _minimax_invoke("get_weather", WEATHER), "</minimax:tool_call>"],
        [
            "<minimax:tool_call>",
            _minimax_invoke("get_weather", WEATHER) + _minimax_invoke("get_time", TIME)[1:],
            "</minimax:tool_call>",
        ],
        [THOUGHT, "</think>", "Sunny."],  # the prompt always opens <think>
        call_marker='<minimax:tool_call>\n<invoke name="get_weather">',
        enforced=True,
        lead=("</think>",),
    )
)


def _cohere(*calls: tuple[str, dict[str, Any]]) -> str:
    items = [
        {"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(calls)
    ]
    return json.dumps(items)


COHERE_RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
FAMILIES.append(
    Family(
        "command-r7b-12-2024-tool_use",
        "command_r",
        ["<|START_ACTION|>", _cohere(*CALLS_ONE), "<|END_ACTION|>"],
        ["<|START_ACTION|>", _cohere(*CALLS_TWO), "<|END_ACTION|>"],
        [
            "<|START_THINKING|>",
            THOUGHT,
            "<|END_THINKING|>",
            COHERE_RESPONSE[0],
            "Sunny.",
            COHERE_RESPONSE[1],
        ],
        call_marker='"tool_name": "get_weather", "parameters": ',
        enforced=True,
        answer_tags=COHERE_RESPONSE,
    )
)
KIMI = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>")
KIMI_ARGS, KIMI_END = "<|tool_call_argument_begin|>", "<|tool_call_end|>"
FAMILIES.append(
    Family(
        "Kimi-K2",
        "kimi_k2",
        [
            KIMI[0],
            KIMI[2],
            "functions.get_weather:0",
            KIMI_ARGS,
            args_json(WEATHER),
            KIMI_END,
            KIMI[1],
        ],
        [
            KIMI[0],
            KIMI[2],
            "functions.get_weather:0",
            KIMI_ARGS,
            args_json(WEATHER),
            KIMI_END,
            KIMI[2] + "functions.get_time:1" + KIMI_ARGS + args_json(TIME) + KIMI_END,
            KIMI[1],
        ],
        None,
        call_marker=None,  # the instruct template does not render earlier calls
        enforced=True,
    )
)
# K2-Thinking writes the same calls; its template spells the tokens and renders earlier calls
# by their ids, and the model reasons in <think> first.
FAMILIES.append(
    replace(
        next(f for f in FAMILIES if f.name == "Kimi-K2"),
        name="Kimi-K2-Thinking",
        thinking=["<think>", THOUGHT, "</think>", "Sunny."],
        call_marker=KIMI[0] + KIMI[2] + "call_1" + KIMI_ARGS,
    )
)
FAMILIES += MORE
BY_NAME = {f.name: f for f in FAMILIES}
