"""Each tool-calling family as a scripted checkpoint sees it: its vendor template (tests/
templates/) and what the family's models really write for an answer, reasoning then an
answer, one call and two calls. Shared by the chat-layer and the server tests.

Script chunks are single tokens and must be distinct, so a family's second call block is one
chunk. Non-ASCII text is left to the unit tests (an added token's raw non-ASCII text decodes
to U+FFFD in mlx-lm's byte-level detokenizer; real models spell it with byte tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ANSWER = ["Sunny", " in Paris."]
THOUGHT = "Let me see."
WEATHER = {"city": "Paris", "days": 3}
TIME = {"zone": "UTC"}
CALLS_ONE = [("get_weather", WEATHER)]
CALLS_TWO = [("get_weather", WEATHER), ("get_time", TIME)]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }
    for name, description, properties in (
        (
            "get_weather",
            "The weather in a city",
            {
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 3},
            },
        ),
        ("get_time", "The time in a zone", {"zone": {"type": "string", "enum": ["UTC"]}}),
    )
]


def _json(args: dict[str, Any]) -> str:
    return json.dumps(args)


def _obj(name: str, args: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": args})


@dataclass(frozen=True)
class Family:
    """A family: its template, the tool format mlxd must detect, and its scripts."""

    name: str  # the template's file name under tests/templates/
    syntax: str  # chat.formats ToolFormat.name
    one_call: list[str]
    two_calls: list[str]
    thinking: list[str] | None  # reasoning then answer, as the model writes it; None: no reasoning
    thinking_kwargs: dict[str, Any] = field(default_factory=dict)  # turn reasoning on
    quiet_kwargs: dict[str, Any] = field(default_factory=dict)  # turn reasoning off
    quiet_system: str = ""  # appended to the system prompt to turn reasoning off
    call_marker: str | None = None  # how an earlier call shows in the prompt (None: not shown)
    enforced: bool = False  # tool_choice required/named is enforced by the grammar
    lead: tuple[str, ...] = ()  # written before an answer or calls (closing a forced <think>)
    answer_tags: tuple[str, str] | None = None  # written around an answer (Command-R7B)
    special: tuple[str, ...] | None = None  # the vocabulary's special tokens, if not ChatML's
    result_lead: tuple[str, ...] | None = None  # lead after a tool result (None: lead)


DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>")
DS_END, DS_SEP = "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _ds_call(name: str, args: dict[str, Any]) -> str:
    return DS[2] + name + DS_SEP + _json(args) + DS_END


def _seed_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
    return f"\n<function={name}>\n{params}</function>\n"


def _qwen_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"\n<function={name}>\n{params}</function>\n"


FAMILIES = [
    Family(
        "DeepSeek-V3.1",
        "deepseek",
        [DS[0], DS[2], "get_weather", DS_SEP, _json(WEATHER), DS_END, DS[1]],
        [
            DS[0],
            DS[2],
            "get_weather",
            DS_SEP,
            _json(WEATHER),
            DS_END,
            _ds_call("get_time", TIME),
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
        ["<|tool_call|>", _obj("get_weather", WEATHER), "<|/tool_call|>"],
        [
            "<|tool_call|>",
            _obj("get_weather", WEATHER),
            "<|/tool_call|>",
            "<|tool_call|>" + _obj("get_time", TIME) + "<|/tool_call|>",
        ],
        None,
        call_marker="<|tool_call|>",
        enforced=True,
    ),
    Family(
        "NVIDIA-Nemotron-Nano-v2",
        "nemotron",
        ["<TOOLCALL>", "[" + _obj("get_weather", WEATHER) + "]", "</TOOLCALL>"],
        ["<TOOLCALL>", "[" + ", ".join(_obj(n, a) for n, a in CALLS_TWO) + "]", "</TOOLCALL>"],
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
        ["<tool_call>", "\n" + _obj("get_weather", WEATHER) + "\n", "</tool_call>"],
        [
            "<tool_call>",
            "\n" + _obj("get_weather", WEATHER) + "\n",
            "</tool_call>",
            "\n<tool_call>\n" + _obj("get_time", TIME) + "\n</tool_call>",
        ],
        None,
        call_marker='<tool_call>\n{"name": "get_weather"',
        enforced=True,
    ),
    Family(
        "granite-3.3-2B-Instruct",
        "granite",
        ["<|tool_call|>", "[" + _obj("get_weather", WEATHER) + "]"],
        ["<|tool_call|>", "[" + ", ".join(_obj(n, a) for n, a in CALLS_TWO) + "]"],
        None,
        call_marker=None,  # the template does not render earlier calls
        enforced=True,
    ),
    Family(
        "Qwen3.5-4B",
        "qwen3_coder",
        ["<tool_call>", _qwen_call("get_weather", WEATHER), "</tool_call>"],
        [
            "<tool_call>",
            _qwen_call("get_weather", WEATHER),
            "</tool_call>",
            "\n<tool_call>" + _qwen_call("get_time", TIME) + "</tool_call>",
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
# Llama 3's vocabulary has <|python_tag|> and no <tool_call> (EOS stays the scripts' <|im_end|>).
LLAMA_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|python_tag|>", "<|eot_id|>")
_LLAMA_WEATHER = json.dumps({"name": "get_weather", "parameters": WEATHER})
FAMILIES.append(
    Family(
        "Llama-3.3-70B-Instruct",  # Llama 3.1's template and syntax
        "llama3",
        [_LLAMA_WEATHER],
        [_LLAMA_WEATHER + "; " + json.dumps({"name": "get_time", "parameters": TIME})],
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
        [KIMI[0], KIMI[2], "functions.get_weather:0", KIMI_ARGS, _json(WEATHER), KIMI_END, KIMI[1]],
        [
            KIMI[0],
            KIMI[2],
            "functions.get_weather:0",
            KIMI_ARGS,
            _json(WEATHER),
            KIMI_END,
            KIMI[2] + "functions.get_time:1" + KIMI_ARGS + _json(TIME) + KIMI_END,
            KIMI[1],
        ],
        None,
        call_marker=None,  # the instruct template does not render earlier calls
        enforced=True,
    )
)
_HERMES_ONE = ["<tool_call>", "\n" + _obj("get_weather", WEATHER) + "\n", "</tool_call>"]
_HERMES_TWO = [*_HERMES_ONE, "\n<tool_call>\n" + _obj("get_time", TIME) + "\n</tool_call>"]
_QWEN_CODER_ONE = ["<tool_call>", _qwen_call("get_weather", WEATHER), "</tool_call>"]
FAMILIES += [
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
        [*_QWEN_CODER_ONE, "\n<tool_call>" + _qwen_call("get_time", TIME) + "</tool_call>"],
        None,
        call_marker="<tool_call>\n<function=get_weather>",
        enforced=True,
    ),
    Family(
        "Llama-3.2-3B-Instruct",  # tools in the first user message; one call per turn
        "llama3",
        [_LLAMA_WEATHER],
        [_LLAMA_WEATHER + "; " + json.dumps({"name": "get_time", "parameters": TIME})],
        None,
        call_marker='{"name": "get_weather", "parameters": ',
        enforced=True,
        special=LLAMA_SPECIAL,  # its template spells no tool marker: the vocabulary tells
    ),
]


def _ds_v3_call(name: str, args: dict[str, Any]) -> str:
    return DS[2] + "function" + DS_SEP + name + "\n```json\n" + _json(args) + "\n```" + DS_END


FAMILIES.append(
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
FAMILIES.append(
    Family(
        "gpt-oss-120b",
        "harmony",
        ["<|channel|>", "commentary to=functions.get_weather <|constrain|>json", "<|message|>"]
        + [_json(WEATHER), "<|call|>"],
        ["<|channel|>", "commentary to=functions.get_weather <|constrain|>json", "<|message|>"]
        + [_json(WEATHER), "<|call|>", _harmony_call("get_time") + _json(TIME) + "<|call|>"],
        ["<|channel|>", "analysis", "<|message|>", THOUGHT, "<|end|>"]
        + ["<|start|>assistant<|channel|>final<|message|>", "Sunny."],
        call_marker="<|start|>assistant to=functions.get_weather<|channel|>commentary json",
        enforced=True,
        answer_tags=("<|channel|>final<|message|>", "<|return|>"),
        special=HARMONY_SPECIAL,
    )
)
BY_NAME = {f.name: f for f in FAMILIES}
