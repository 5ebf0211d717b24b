"""The one mapping table from option names to SamplingParams, for CLI flags and HTTP fields.

`OPTIONS` lists every decoding option once: its HTTP field name, CLI flag, type, help and
target `SamplingParams` field; its bounds are `mlxd.config.SAMPLING_BOUNDS` (the engine checks
the same ones). The CLI generates its flags from it; the server validates its
fields against it. `ChatOptions.parse` validates a request's options (by Option name) into
the typed value the chat layer takes; `sampling_params` resolves them, then the model's
generation_config.json defaults, then `mlxd.config.SAMPLING_DEFAULTS`. `stop` and
`response_format` are not SamplingParams: the chat layer applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from mlxd.chat.constraints import response_schema as _response_schema
from mlxd.checkpoint import sampling_defaults
from mlxd.config import LIMITS, SAMPLING_BOUNDS, Bounds, setting_int
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind, SamplingParams

__all__ = [
    "OPTIONS",
    "ChatOptions",
    "Option",
    "OptionKind",
    "check_stop_count",
    "response_schema",
    "sampling_params",
    "validate_option",
]


class OptionKind(Enum):
    """How an option's value is parsed and checked."""

    FLOAT = "float"
    INT = "int"
    SEED = "seed"  # an int that may be None (unset)
    BOOL = "bool"
    LOGIT_BIAS = "logit_bias"  # {token id: bias}, bounds apply to each bias
    STOP = "stop"  # a string or a list of strings
    RESPONSE_FORMAT = "response_format"  # OpenAI's {"type": "json_schema", ...} object
    DRAFT_KIND = "draft_kind"  # one of mlxd.types.DraftKind
    BREAKERS = "breakers"  # DRY sequence breakers: a list of short strings


FLOAT, INT, SEED, BOOL = OptionKind.FLOAT, OptionKind.INT, OptionKind.SEED, OptionKind.BOOL
LOGIT_BIAS, STOP, RESPONSE_FORMAT = (
    OptionKind.LOGIT_BIAS,
    OptionKind.STOP,
    OptionKind.RESPONSE_FORMAT,
)


@dataclass(frozen=True, slots=True)
class Option:
    """One decoding option: `name` is the HTTP field and the key of the options dict."""

    name: str
    cli_flag: str
    kind: OptionKind
    help: str
    target: str | None = None  # SamplingParams field; None: not a SamplingParams field (stop)
    cli_switch: tuple[str, object] | None = None  # a second flag that sets this fixed value

    @property
    def bounds(self) -> Bounds | None:
        """The valid range (of each bias, for logit_bias); None for booleans and stop. An
        alias (repeat_last_n) has its target's."""
        return SAMPLING_BOUNDS.get(self.name) or SAMPLING_BOUNDS.get(self.target or "")


# fmt: off
# Repetition controls, llama.cpp's names (docs/usage/chat-layer.md); flag and field from the name.
_REPETITION = [
    ("dry_multiplier", FLOAT, "DRY: penalize tokens that extend a repetition (0: off)"),
    ("dry_base", FLOAT, "DRY: the penalty grows as this to the power of the excess length"),
    ("dry_allowed_length", INT, "DRY: repetitions up to this many tokens are not penalized"),
    ("dry_penalty_last_n", INT, "DRY: how many recent tokens it scans (-1: all, 0: off)"),
    ("dry_sequence_breakers", OptionKind.BREAKERS,
     'DRY: a repetition never continues across these (repeatable; default \\n : " *)'),
    ("xtc_probability", FLOAT, "XTC: the chance per token of excluding the top choices (0: off)"),
    ("xtc_threshold", FLOAT, "XTC: tokens above this probability, but the least likely, go"),
    ("loop_repeats", INT,
     'end the answer (finish reason "length") once a run of tokens repeats this many times'),
]

# One option per entry, laid out as the table it is.
_OPTION_LIST = [
    #      name, cli flag, type, help, SamplingParams field
    Option("temperature", "--temperature", FLOAT, "sampling temperature; 0 is greedy",
           "temperature"),
    Option("top_p", "--top-p", FLOAT, "nucleus sampling: keep the smallest set with this mass",
           "top_p"),
    Option("top_k", "--top-k", INT, "keep the k most likely tokens (0: all)", "top_k"),
    Option("min_p", "--min-p", FLOAT, "drop tokens below min_p x the top probability", "min_p"),
    Option("repetition_penalty", "--repetition-penalty", FLOAT,
           "penalize recently seen tokens (1: off)", "repetition_penalty"),
    Option("repetition_context_size", "--repetition-context-size", INT,
           "how many recent tokens the repetition penalty looks at", "repetition_context_size"),
    Option("repeat_last_n", "--repeat-last-n", INT,
           "llama.cpp's name for repetition_context_size (set one of the two)",
           "repetition_context_size"),
    Option("presence_penalty", "--presence-penalty", FLOAT,
           "penalize tokens that already appeared", "presence_penalty"),
    Option("frequency_penalty", "--frequency-penalty", FLOAT,
           "penalize tokens by how often they appeared", "frequency_penalty"),
    *(Option(name, "--" + name.replace("_", "-"), kind, text, name)
      for name, kind, text in _REPETITION),
    Option("seed", "--seed", SEED, "random seed for reproducible sampling", "seed"),
    Option("max_tokens", "--max-tokens", INT, "most tokens to generate", "max_tokens"),
    Option("max_reasoning_tokens", "--max-reasoning-tokens", INT,
           "end the reasoning after this many tokens, then answer (0: no reasoning)",
           "max_reasoning_tokens"),
    Option("logit_bias", "--logit-bias", LOGIT_BIAS,
           'bias per token id, JSON {"id": bias}; bounds apply to each bias', "logit_bias"),
    Option("logprobs", "--logprobs", BOOL, "return the log probability of each token",
           "logprobs"),
    Option("top_logprobs", "--top-logprobs", INT, "also return this many alternatives per token",
           "top_logprobs"),
    Option("ignore_eos", "--ignore-eos", BOOL, "keep generating past end-of-sequence tokens",
           "ignore_eos"),
    Option("stop", "--stop", STOP, "stop when this string appears (repeatable); not emitted",
           None),
    Option("draft_kind", "--draft-kind", OptionKind.DRAFT_KIND,
           "speculative decoding: none, ngram (prompt lookup), model (the draft model), mtp "
           "(the checkpoint's MTP head) or dflash (a DFlash drafter as --draft-model)",
           "draft_kind"),
    Option("num_draft_tokens", "--num-draft-tokens", INT,
           "speculative decoding: most draft tokens verified per step", "num_draft_tokens"),
    Option("response_format", "--json-schema", RESPONSE_FORMAT,
           "answer with JSON valid against this JSON schema (inline or a file); --json-mode: "
           "any JSON object", None, cli_switch=("--json-mode", {"type": "json_object"})),
]
# fmt: on

OPTIONS: dict[str, Option] = {o.name: o for o in _OPTION_LIST}


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """A request's decoding options, validated against OPTIONS (field names are Option names;
    None: not set, so the model's default or mlxd's applies)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    repetition_context_size: int | None = None
    repeat_last_n: int | None = None  # llama.cpp's name for repetition_context_size
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: tuple[str, ...] | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    loop_repeats: int | None = None
    seed: int | None = None
    max_tokens: int | None = None
    max_reasoning_tokens: int | None = None
    logit_bias: tuple[tuple[int, float], ...] | None = None  # (token id, bias), sorted
    logprobs: bool | None = None
    top_logprobs: int | None = None
    ignore_eos: bool | None = None
    stop: tuple[str, ...] = ()
    draft_kind: DraftKind | None = None
    num_draft_tokens: int | None = None
    response_format: Mapping[str, Any] | None = None  # OpenAI's response_format object

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> ChatOptions:
        """Validate raw options (keys are Option names; None means unset). Raises
        InvalidRequest(param=name) on unknown names, wrong types (bools are not numbers),
        NaN/inf, or out-of-bounds values."""
        unknown = [k for k in raw if k not in OPTIONS]
        if unknown:
            raise InvalidRequest(f"unknown option {unknown[0]!r}", param=unknown[0])
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if value is not None:
                values[name] = validate_option(OPTIONS[name], value)
        for name in ("stop", "dry_sequence_breakers"):
            if name in values:
                values[name] = tuple(values[name])
        window, alias = values.get("repetition_context_size"), values.get("repeat_last_n")
        if None not in (window, alias) and window != alias:
            raise InvalidRequest(
                "set repeat_last_n or repetition_context_size, not both", param="repeat_last_n"
            )
        return cls(**values)

    def wire(self) -> dict[str, object]:
        """The options set, by Option name, as JSON values: what an HTTP request sends."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            if f.name == "logit_bias":
                value = {str(token): bias for token, bias in value}
            elif f.name in ("stop", "dry_sequence_breakers"):
                value = list(value)
            elif isinstance(value, DraftKind):
                value = value.value
            out[f.name] = value
        return out


def sampling_params(
    options: ChatOptions,
    model_defaults: Mapping[str, object] | None = None,
    *,
    vocab_size: int | None = None,
) -> SamplingParams:
    """`options` resolved into SamplingParams: options not set fall back to `model_defaults`
    (a generation_config.json, read by mlxd.checkpoint.sampling_defaults), then
    SAMPLING_DEFAULTS. Raises InvalidRequest(param="logit_bias") on a token id outside
    `vocab_size`."""
    values: dict[str, object] = {}
    for name, raw in _defaults(model_defaults).items():
        values[name] = validate_option(OPTIONS[name], raw)
    for opt in OPTIONS.values():
        value = getattr(options, opt.name)
        if opt.target is not None and value is not None:
            values[opt.target] = value
    if options.logit_bias and vocab_size is not None:
        for token, _ in options.logit_bias:
            if token >= vocab_size:
                raise InvalidRequest(
                    f"logit_bias key {token!r} is not a token id", param="logit_bias"
                )
    if values.get("top_logprobs") and not values.get("logprobs"):
        values["logprobs"] = True  # asking for alternatives implies asking for logprobs
    return SamplingParams(**values)  # type: ignore[arg-type]


def response_schema(options: ChatOptions) -> dict[str, Any] | None:
    """The JSON schema `options` ask the answer to follow (None: free text)."""
    return _response_schema(options.response_format)


def validate_option(opt: Option, raw: object, *, vocab_size: int | None = None) -> object:
    """Check one raw value against its Option; return the value in SamplingParams form."""
    if opt.kind is FLOAT:
        return _check_bounds(opt, _as_float(opt.name, raw))
    if opt.kind in (INT, SEED):
        return int(_check_bounds(opt, _as_int(opt.name, raw)))
    if opt.kind is BOOL:
        if not isinstance(raw, bool):
            raise InvalidRequest(f"{opt.name} must be true or false", param=opt.name)
        return raw
    if opt.kind is LOGIT_BIAS:
        return _logit_bias(opt, raw, vocab_size)
    if opt.kind is RESPONSE_FORMAT:
        _response_schema(raw)
        return raw
    if opt.kind is OptionKind.BREAKERS:
        return _breakers(opt, raw)
    if opt.kind is OptionKind.DRAFT_KIND:
        kinds = [k.value for k in DraftKind]
        if isinstance(raw, DraftKind) or raw in kinds:
            return DraftKind(raw)
        raise InvalidRequest(f"{opt.name} must be one of {', '.join(kinds)}", param=opt.name)
    return _stop(opt, raw)


def _defaults(model_defaults: Mapping[str, object] | None) -> dict[str, object]:
    model = sampling_defaults(model_defaults or {})  # SamplingParams' defaults fill the rest
    # A model default outside our bounds (e.g. temperature 3) must not break every request.
    return {k: v for k, v in model.items() if _fits(OPTIONS[k], v)}


def _fits(opt: Option, value: object) -> bool:
    try:
        validate_option(opt, value)
    except InvalidRequest:
        return False
    return True


def _as_float(name: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidRequest(f"{name} must be a number", param=name)
    value = float(raw)
    if not math.isfinite(value):
        raise InvalidRequest(f"{name} must be a finite number", param=name)
    return value


def _as_int(name: str, raw: object) -> int:
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)  # JSON clients may send 16.0
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidRequest(f"{name} must be an integer", param=name)
    return raw


def _check_bounds(opt: Option, value: float) -> float:
    if opt.bounds is not None:
        opt.bounds.check(opt.name, value)
    return value


def _logit_bias(opt: Option, raw: object, vocab_size: int | None) -> tuple[tuple[int, float], ...]:
    if not isinstance(raw, Mapping):
        raise InvalidRequest("logit_bias must be an object of token id -> bias", param=opt.name)
    if len(raw) > LIMITS["logit_bias_entries"]:
        raise InvalidRequest(
            f"logit_bias has more than {LIMITS['logit_bias_entries']} entries", param=opt.name
        )
    out: dict[int, float] = {}
    for key, bias in raw.items():
        token = _token_id(key)
        if token is None or (vocab_size is not None and token >= vocab_size):
            raise InvalidRequest(f"logit_bias key {key!r} is not a token id", param=opt.name)
        out[token] = _check_bounds(opt, _as_float(opt.name, bias))
    return tuple(sorted(out.items()))


def _token_id(key: object) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key if key >= 0 else None
    if isinstance(key, str) and key.isdigit() and key.isascii():
        return int(key)
    return None


def _breakers(opt: Option, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not all(isinstance(s, str) and s for s in raw):
        raise InvalidRequest(f"{opt.name} must be a list of non-empty strings", param=opt.name)
    if len(raw) > LIMITS["dry_sequence_breakers"]:
        raise InvalidRequest(
            f"{opt.name} has more than {LIMITS['dry_sequence_breakers']} entries", param=opt.name
        )
    if any(len(s) > LIMITS["dry_breaker_chars"] for s in raw):
        raise InvalidRequest(
            f"{opt.name} entries must be at most {LIMITS['dry_breaker_chars']} characters",
            param=opt.name,
        )
    return tuple(dict.fromkeys(raw))


def check_stop_count(count: int, param: str = "stop") -> None:
    """The operator's cap on stop strings per request (MLXD_MAX_STOP_STRINGS); the server
    checks it as it parses a request, before any model load."""
    limit = setting_int("max_stop_strings")
    if count > limit:
        raise InvalidRequest(f"at most {limit} stop strings are allowed", param=param)


def _stop(opt: Option, raw: object) -> list[str]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not all(isinstance(s, str) for s in items):
        raise InvalidRequest("stop must be a string or a list of strings", param=opt.name)
    check_stop_count(len(items), opt.name)
    for s in items:
        if not s:
            raise InvalidRequest("stop strings must not be empty", param=opt.name)
        if len(s) > LIMITS["stop_string_chars"]:
            raise InvalidRequest(
                f"stop strings must be at most {LIMITS['stop_string_chars']} characters",
                param=opt.name,
            )
    return list(dict.fromkeys(items))
