"""The shared parts of tests/vendor_families.py: the conversation every family is tested on
(the tools, the calls, the answer), the Family record, and the call spellings more than one
family writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.chat.scripted import make_scripted_checkpoint
from tests.vendor_templates import vendor_template

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
                "city": {"type": "string", "enum": ["Paris", "Rome"], "description": "A city"},
                "days": {"type": "integer", "minimum": 1, "maximum": 3, "description": "Days"},
            },
        ),
        (
            "get_time",
            "The time in a zone",
            {"zone": {"type": "string", "enum": ["UTC"], "description": "A time zone"}},
        ),
    )
]


def args_json(args: dict[str, Any]) -> str:
    return json.dumps(args)


def call_json(name: str, args: dict[str, Any]) -> str:
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


def ds_call(name: str, args: dict[str, Any]) -> str:
    return DS[2] + name + DS_SEP + args_json(args) + DS_END


def qwen_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"\n<function={name}>\n{params}</function>\n"


# Llama 3's vocabulary has <|python_tag|> and no <tool_call> (EOS stays the scripts' <|im_end|>).
LLAMA_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|python_tag|>", "<|eot_id|>")
LLAMA_WEATHER = json.dumps({"name": "get_weather", "parameters": WEATHER})
LLAMA_TWO = LLAMA_WEATHER + "; " + json.dumps({"name": "get_time", "parameters": TIME})


def family_checkpoint(path: Path, family: Family, kind: str, script: list[str]) -> Path:
    """`family`'s scripted checkpoint at `path` (kept if there) writing `script` as an answer
    ("answer": inside its answer tags), a tool-result answer ("result"), calls, or reasoning
    ("think": as is; others after the family's lead)."""
    if kind == "answer" and family.answer_tags is not None:
        script = [family.answer_tags[0], *script, family.answer_tags[1]]
    lead = family.lead if kind != "result" or family.result_lead is None else family.result_lead
    script = script if kind == "think" else [*lead, *script]
    if not (path / "config.json").exists():
        make_scripted_checkpoint(
            path, script, template=vendor_template(family.name), special=family.special
        )
        # Command-R7B's preamble alone is over 4096 tokens of the tiny tokenizer.
        config = json.loads((path / "config.json").read_text())
        config["max_position_embeddings"] = 16384
        (path / "config.json").write_text(json.dumps(config))
    return path
