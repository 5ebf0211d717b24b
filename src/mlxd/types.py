"""Values shared by every layer: sampling parameters, finish reasons, usage and events.

Engine events speak token ids (TokenEvent, FinishEvent); chat events speak text
(TextDelta, ReasoningDelta, ToolCall, Warning) and end with the same FinishEvent. All are
frozen values that cross thread boundaries unchanged. Tokenizer names what mlxd uses of
mlx-lm's tokenizer.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from mlxd.config import DRY_SEQUENCE_BREAKERS
from mlxd.config import SAMPLING_DEFAULTS as _DEFAULT


class FinishReason(StrEnum):
    STOP = "stop"  # eos, stop token or stop string
    LENGTH = "length"  # max_tokens or context window reached
    TOOL_CALLS = "tool_calls"  # chat layer: the answer ended in tool calls
    LOOP = "loop"  # loop detection: a repetition loop ended it (the APIs say "length")
    CANCELLED = "cancelled"  # handle.cancel(), client disconnect, Ctrl-C
    ERROR = "error"  # this request failed; see FinishEvent.error


class DraftKind(StrEnum):
    """Where speculative decoding gets its draft tokens (docs/engine-design.md)."""

    NONE = "none"
    NGRAM = "ngram"  # prompt lookup: the continuation of the last tokens' latest earlier match
    MODEL = "model"  # a smaller model with the same vocabulary
    MTP = "mtp"  # the checkpoint's multi-token-prediction head (backend.speculation.mtp_head)
    DFLASH = "dflash"  # a DFlash block-diffusion drafter (backend.speculation.dflash_load)


class ModelKind(StrEnum):
    """What a loaded model serves: generation (chat, completions) or embeddings."""

    GENERATION = "generation"
    EMBEDDING = "embedding"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request decoding options, built and validated by chat.options.sampling_params;
    the defaults are config.SAMPLING_DEFAULTS."""

    temperature: float = _DEFAULT["temperature"]
    top_p: float = _DEFAULT["top_p"]
    top_k: int = _DEFAULT["top_k"]
    min_p: float = _DEFAULT["min_p"]
    repetition_penalty: float = _DEFAULT["repetition_penalty"]
    repetition_context_size: int = _DEFAULT["repetition_context_size"]
    presence_penalty: float = _DEFAULT["presence_penalty"]
    frequency_penalty: float = _DEFAULT["frequency_penalty"]
    dry_multiplier: float = _DEFAULT["dry_multiplier"]  # 0: DRY off
    dry_base: float = _DEFAULT["dry_base"]
    dry_allowed_length: int = _DEFAULT["dry_allowed_length"]
    dry_penalty_last_n: int = _DEFAULT["dry_penalty_last_n"]
    dry_sequence_breakers: tuple[str, ...] = DRY_SEQUENCE_BREAKERS
    xtc_probability: float = _DEFAULT["xtc_probability"]  # 0: XTC off
    xtc_threshold: float = _DEFAULT["xtc_threshold"]
    loop_repeats: int | None = None  # None: no loop detection
    max_reasoning_tokens: int | None = None  # None: reasoning is bounded by max_tokens only
    logit_bias: tuple[tuple[int, float], ...] = ()
    seed: int | None = None
    max_tokens: int | None = None  # None: the engine's budget rule decides
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False
    draft_kind: DraftKind | None = None  # None: the engine's default (EngineConfig)
    num_draft_tokens: int | None = None  # None: the engine's default

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def dry(self) -> bool:
        """DRY penalizes this request's tokens (a multiplier and a window)."""
        return self.dry_multiplier > 0.0 and self.dry_penalty_last_n != 0


class PieceKind(StrEnum):
    TEXT = "text"  # literal text (a marker in it is written as its token)
    JSON = "json"  # a JSON value valid against the schema in `text`
    STRING = "string"  # a raw string value (XML-style parameters)


@dataclass(frozen=True, slots=True)
class GrammarPiece:
    """One piece of a constrained answer. A STRING is one of `options`, or without options up
    to `max_chars` characters without "<" (so it cannot run into the closing tag)."""

    kind: PieceKind
    text: str = ""  # TEXT: the text; JSON: the schema as JSON text
    max_chars: int = 0
    options: tuple[str, ...] = ()

    @classmethod
    def literal(cls, text: str) -> GrammarPiece:
        return cls(PieceKind.TEXT, text)

    @classmethod
    def json_value(cls, schema: str) -> GrammarPiece:
        return cls(PieceKind.JSON, schema)

    @classmethod
    def raw_string(cls, max_chars: int, options: tuple[str, ...] = ()) -> GrammarPiece:
        return cls(PieceKind.STRING, max_chars=max_chars, options=options)


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    """A model's reasoning block in token ids, for the engine's reasoning budget (set by the
    chat layer from the markers it detects); `open`: the prompt already opened the block."""

    start: tuple[int, ...]
    end: tuple[int, ...]
    open: bool = False


@dataclass(frozen=True, slots=True)
class OutputConstraint:
    """What the answer must be, enforced token by token: `prefix`, then JSON valid against
    `schema`, then `suffix` (a tool call's markers), then EOS. Built by mlxd.chat.constraints.
    With `choices`, the answer is instead one of these sequences of pieces (a call to one of
    several tools in a syntax that is not one JSON value); `schema` then only sizes it.

    With `reasoning` markers, a reasoning block is left free and the constraint starts after
    its end marker; `reasoning_open` says the prompt already opened one. `param` names the
    request field the constraint comes from, for errors.
    """

    schema: str  # a JSON schema as JSON text
    param: str = "response_format"
    prefix: str = ""
    suffix: str = ""
    reasoning: tuple[str, str] | None = None
    reasoning_open: bool = False
    choices: tuple[tuple[GrammarPiece, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class PromptBoundaries:
    """Where a chat prompt's parts end, in tokens (0: unknown). The engine snapshots its
    cache there so that later prompts sharing those parts skip them (docs/prefix-cache.md)."""

    system: int = 0  # end of the system prompt
    history: int = 0  # start of the last message: a branch (same history) shares this much
    next_turn: int = 0  # the next turn (this prompt, the answer, a new message) shares this much

    def positions(self) -> tuple[int, ...]:
        return self.system, self.history, self.next_turn


def common_prefix_len(a: Sequence[object], b: Sequence[object]) -> int:
    """Length of the common prefix of two token or text sequences (the prefix cache's and the
    prompt boundaries' one rule): a bisection over slice comparisons, done in C."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    reasoning_tokens: int = 0  # completion tokens of the reasoning part (the chat layer's)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Timings:
    queued_s: float = 0.0  # submit -> admitted
    ttft_s: float = 0.0  # submit -> first token
    total_s: float = 0.0  # submit -> finish
    draft_tokens: int = 0  # speculative decoding: draft tokens the target verified
    accepted_draft_tokens: int = 0  # of those, accepted (each saved one target forward)
    draft_kind: str | None = None  # the kind that drafted them (ngram, model, mtp); None: none


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token_id, logprob), best first


# ---- engine events: token ids ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One or more new tokens (a slow consumer receives merged deltas)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token when params.logprobs


@dataclass(frozen=True, slots=True)
class FinishEvent:
    """How a stream ended: the last event of an engine stream and of a chat stream (the chat
    layer passes the engine's on, with TOOL_CALLS or STOP as its reason where it applies)."""

    reason: FinishReason
    usage: Usage
    timings: Timings = field(default_factory=Timings)
    error: str | None = None  # set when reason is ERROR
    error_code: str | None = None  # MlxdError.code of the failure, when known
    stop_string: str | None = None  # chat layer: the request's stop string that ended it


EngineEvent = TokenEvent | FinishEvent


# ---- chat events: text --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # of the tokens that produced this text


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object as a string, as OpenAI sends it
    index: int = 0


@dataclass(frozen=True, slots=True)
class Warning:
    message: str


ChatEvent = TextDelta | ReasoningDelta | ToolCall | Warning | FinishEvent


# ---- the tokenizer seam --------------------------------------------------------------


class Detokenizer(Protocol):
    """mlx-lm's StreamingDetokenizer: token ids in, UTF-8-safe text segments out."""

    def add_token(self, token: int) -> None: ...

    def finalize(self) -> None: ...

    @property
    def last_segment(self) -> str: ...


class Tokenizer(Protocol):
    """What mlxd uses of mlx-lm's TokenizerWrapper (a model's `ModelInfo.tokenizer`).

    Optional attributes (chat_template, bos_token, think_start/think_end, tool_call_start/
    tool_call_end, tool_parser, model_max_length) are read with getattr and may be missing.
    """

    @property
    def eos_token_ids(self) -> Collection[int]: ...

    @property
    def detokenizer(self) -> Detokenizer: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def get_vocab(self) -> dict[str, int]: ...

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs: object,
    ) -> str | list[int]: ...


# ---- the image seam (vision models) -------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class PreparedImage:
    """One image as the model's processor made it: its arrays (numpy; `pixel_values` and any
    per-image extras the vision tower takes), how many prompt positions its features fill,
    a digest of those arrays (what the prefix cache keys on), and `text`: what the processor
    writes in the prompt in place of the image's placeholder (the image token `tokens` times,
    with the family's start, row, tile and end tokens around and between them)."""

    arrays: dict[str, Any]
    tokens: int
    digest: str
    text: str


class ImageProcessor(Protocol):
    """A vision model's image preprocessing (backend.vision.VisionProcessor); thread-safe."""

    @property
    def image_token(self) -> str: ...  # the placeholder text a chat template writes

    @property
    def image_token_id(self) -> int: ...  # the positions image features fill

    def prepare(self, image: Any) -> PreparedImage: ...  # a decoded RGB PIL image


@dataclass(frozen=True, slots=True, eq=False)
class ImageInputs:
    """The images of one request in prompt order. Each `placeholder` the template wrote
    becomes its image's `text`, which holds image.tokens `token_id` positions (in one run or
    several); the engine merges the image's features there at prefill."""

    images: tuple[PreparedImage, ...]
    token_id: int
    placeholder: str

    @property
    def key(self) -> str:
        """Identity of the images together (the same images, in order, give the same key)."""
        return ",".join(image.digest for image in self.images)
