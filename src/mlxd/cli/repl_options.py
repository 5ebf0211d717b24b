"""Generation flags shared by `mlxd run` and `mlxd chat`, generated from the chat layer's
option table (mlxd.chat.options.OPTIONS), so each flag maps one to one onto the server's
request field of the same meaning.

"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlxd.chat.chat_request import Reasoning
from mlxd.chat.options import OPTIONS, ChatOptions, Option, OptionKind
from mlxd.chat.tool_choice import ToolChoice
from mlxd.cli.kv_flags import add_kv_flags
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind

# Flags this module defines itself; an OPTIONS entry with the same flag is skipped.
OWN_FLAGS = ("--system", "--json", "--model", "--hide-reasoning", "--no-think")


def add_generation_flags(parser: argparse.ArgumentParser) -> None:
    """--system, --hide-reasoning, --no-think, --trust-remote-code, --draft-model, the KV
    precision (kv_flags) and every sampling flag."""
    parser.add_argument("--system", metavar="TEXT", help="system prompt")
    parser.add_argument(
        "--hide-reasoning",
        action="store_true",
        help="do not print the model's reasoning (it is printed dimmed on stderr by default)",
    )
    parser.add_argument(
        "--no-think",
        action="store_true",
        help="ask the template to skip reasoning (chat_template_kwargs enable_thinking=false)",
    )
    add_reasoning_flags(parser)
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow models that ship their own code (refused by default)",
    )
    parser.add_argument(
        "--draft-model",
        metavar="REF",
        help="a smaller model with the same tokenizer that drafts tokens for speculative "
        "decoding, or a DFlash drafter made for the model (as serve --draft-model; "
        "--draft-kind defaults to model, or dflash, then)",
    )
    add_kv_flags(parser)
    group = parser.add_argument_group(
        "sampling", "each flag sets the /v1/chat/completions request field named in its help"
    )
    for option in OPTIONS.values():
        if option.cli_flag in OWN_FLAGS:
            continue
        flags = group.add_mutually_exclusive_group() if option.cli_switch else group
        flags.add_argument(
            option.cli_flag, dest=_dest(option), default=None, **_flag_kwargs(option)
        )
        if option.cli_switch:
            switch, value = option.cli_switch
            flags.add_argument(
                switch,
                dest=_dest(option),
                action="store_const",
                const=value,
                help=f"same as {option.name}={json.dumps(value)}",
            )


def add_reasoning_flags(parser: argparse.ArgumentParser) -> None:
    """--reasoning-start/--reasoning-end: markers for a model whose template and vocabulary
    do not reveal them (run, chat and serve)."""
    help_end = "with --reasoning-start: the text that ends the model's reasoning"
    parser.add_argument(
        "--reasoning-start",
        metavar="TEXT",
        help="the text that opens the model's reasoning, when mlxd cannot tell it from the "
        "template or vocabulary (with --reasoning-end; the budget and the split use them)",
    )
    parser.add_argument("--reasoning-end", metavar="TEXT", help=help_end)


def reasoning_from(args: argparse.Namespace) -> Reasoning:
    """The markers --reasoning-start/--reasoning-end give ("auto": the detected ones)."""
    start, end = getattr(args, "reasoning_start", None), getattr(args, "reasoning_end", None)
    if start is None and end is None:
        return "auto"
    if not start or not end:
        raise InvalidRequest(
            "--reasoning-start and --reasoning-end go together", param="reasoning_start"
        )
    return (start, end)


def chat_options_from_args(args: argparse.Namespace) -> ChatOptions:
    """The options the user set (unset flags are None), validated against the table now, so
    a bad value fails in milliseconds instead of after loading the model."""
    raw = {option.name: getattr(args, _dest(option), None) for option in OPTIONS.values()}
    return ChatOptions.parse(raw)


def tool_choice_from(value: str | None) -> ToolChoice:
    """--tool-choice: none, auto, required, or the name of one of the --tools."""
    if value is None or value in ("none", "auto", "required"):
        return ToolChoice.parse(value)
    return ToolChoice.named(value)


def template_kwargs_from(no_think: bool) -> dict[str, object] | None:
    return {"enable_thinking": False} if no_think else None


# ---- the option table --------------------------------------------------------------------


def _dest(option: Option) -> str:
    return "opt_" + option.name


def _flag_kwargs(option: Option) -> dict[str, Any]:
    """argparse settings for one option; values are checked against the table's bounds
    later, by ChatOptions.parse, exactly as the server checks its fields."""
    help_text = f"{option.help} [request field: {option.name}]"
    match option.kind:
        case OptionKind.BOOL:
            return {"action": "store_true", "help": help_text}
        case OptionKind.STOP | OptionKind.BREAKERS:
            return {"action": "append", "metavar": "TEXT", "help": help_text}
        case OptionKind.LOGIT_BIAS:
            return {"type": _json_object, "metavar": "JSON", "help": help_text}
        case OptionKind.INT | OptionKind.SEED:
            return {"type": _strict(int), "metavar": "N", "help": help_text}
        case OptionKind.FLOAT:
            return {"type": _strict(float), "metavar": "X", "help": help_text}
        case OptionKind.DRAFT_KIND:
            return {"choices": [k.value for k in DraftKind], "help": help_text}
        case OptionKind.RESPONSE_FORMAT:
            return {"type": _json_schema_format, "metavar": "FILE|JSON", "help": help_text}


def _strict(kind: type) -> Callable[[str], object]:
    """An argparse type: the number itself, never NaN/inf (bounds are the table's job)."""

    def convert(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        return value

    convert.__name__ = kind.__name__
    return convert


def _json_schema_format(text: str) -> dict[str, Any]:
    """--json-schema: a JSON schema, inline (starts with `{`) or in a file, as the
    response_format value the server receives for it."""
    source = text
    if not text.lstrip().startswith(("{", "[")):
        try:
            source = Path(text).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise argparse.ArgumentTypeError(f"cannot read {text}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise argparse.ArgumentTypeError(f"cannot read {text}: not UTF-8 text") from None
    try:
        schema = json.loads(source)
    except (json.JSONDecodeError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"not a JSON schema ({e})") from None
    if not isinstance(schema, dict):
        raise argparse.ArgumentTypeError("a JSON schema must be a JSON object")
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value
