"""Output constraints compiled into grammars, within size, time and memory budgets (llguidance).

`compile_constraint` runs on the caller's thread before a request is queued, never on the
engine thread: an invalid, unsupported, impossible or too costly constraint raises
InvalidRequest naming its request field, and the engine only ever sees a ready grammar. A new
grammar is first validated in a child process that is killed when MLXD_GRAMMAR_SECONDS end
(compile_pool.py: part of llguidance's JSON-schema compiler has no limit of its own), then
compiled here; verdicts and compiled grammars are cached. Each sequence then walks its own copy
of the compiled matcher (backend/structured/grammar_mask.py).

Why llguidance rather than xgrammar (benchmarks/grammar_libs_bench.py, figures in
benchmarks/results/grammar-libs-2026-12-01.json): on this CPU both compute a mask in tens of
microseconds on SmolLM2's 49k vocabulary (random walk median 47-53 us vs 20-49 us; on the
tiny 482-token vocabulary 2 us vs 1 us) and compile the schemas we tried in a few
milliseconds, far below one decode step; but xgrammar's Linux wheel requires torch, triton and
transformers (about a gigabyte), while llguidance is one self-contained wheel with no
dependencies, bounds most of its own work (lexer fuel, Earley items, grammar size: a hostile
grammar ends in an error state, not a stall), releases the GIL while it compiles and computes masks,
and is maintained with vLLM, SGLang and llama.cpp among its users.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import llguidance
import numpy as np

from mlxd.backend.structured.compile_pool import Outcome, Verdict, shared_pool
from mlxd.backend.structured.finite_schema import has_finite_instance
from mlxd.backend.structured.schema_bounds import ValueCaps, with_default_bounds
from mlxd.config import setting_float, setting_int
from mlxd.errors import EngineBusy, EngineUnavailable, InvalidRequest
from mlxd.types import OutputConstraint, PieceKind, Tokenizer

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = [
    "CompiledGrammar",
    "JSON_LAYOUT",
    "compile_constraint",
    "grammar_tokenizer",
    "value_caps",
]

# JSON is written as Python's json.dumps writes it (", " and ": ", no other whitespace): a
# model cannot pad an answer with endless blank lines, and after the closing brace only EOS
# is left. Overrides whatever "x-guidance" a schema carries.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# llguidance's own per-step bounds stay at their defaults (a mask step that exceeds them puts
# that sequence in an error state, which fails the request, not the batch); errors stay terse.
_LIMITS = llguidance.LLParserLimits(verbose_errors=False)
_CACHED_GRAMMARS = 64  # compiled grammars kept per model (a client repeats its schema)
_CACHED_VERDICTS = 1024  # validation results (digest -> error, "" when valid), every model
_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class CompiledGrammar:
    """A constraint ready to run: a matcher in its start state (never advanced itself: every
    sequence gets a copy), the size of the masks, and how reasoning is told apart."""

    matcher: llguidance.LLMatcher
    tokenizer: llguidance.LLTokenizer
    mask_size: int  # token ids a mask covers (the model's logits may be wider or narrower)
    reasoning_start: int | None  # the one token that opens a reasoning block, allowed first
    reasoning_end: bytes  # the text that closes it ("" when the model has no reasoning)
    reasoning_open: bool  # the prompt opened a reasoning block: start free
    param: str
    end_tokens: tuple[int, ...] = ()  # EOS ids: never while reasoning (the answer must come)
    reasoning_close: int | None = None  # the one token that closes reasoning, if it is one

    def new_matcher(self) -> llguidance.LLMatcher:
        return self.matcher.deep_copy()


class _ModelGrammars:
    """One tokenizer's llguidance tokenizer and its recently compiled grammars."""

    def __init__(self, tokenizer: llguidance.LLTokenizer) -> None:
        self.tokenizer = tokenizer
        self.lock = threading.Lock()
        self.compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()

    def get(self, grammar: str) -> llguidance.LLMatcher | None:
        with self.lock:
            matcher = self.compiled.get(grammar)
            if matcher is not None:
                self.compiled.move_to_end(grammar)
            return matcher

    def put(self, grammar: str, matcher: llguidance.LLMatcher) -> None:
        with self.lock:
            self.compiled[grammar] = matcher
            while len(self.compiled) > _CACHED_GRAMMARS:
                self.compiled.popitem(last=False)


_MODELS: weakref.WeakKeyDictionary[Tokenizer, _ModelGrammars] = weakref.WeakKeyDictionary()
_MODELS_LOCK = threading.Lock()
_VERDICTS: OrderedDict[bytes, str] = OrderedDict()


def grammar_tokenizer(
    tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Collection[int]
) -> llguidance.LLTokenizer:
    """llguidance's view of a model's tokenizer, built once per tokenizer (about 0.3 s for a
    49k vocabulary) from its tokenizer.json; masks cover max(vocab_size, tokenizer size)."""
    return _model_grammars(tokenizer, vocab_size, eos_token_ids).tokenizer


def _model_grammars(
    tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Collection[int]
) -> _ModelGrammars:
    with _MODELS_LOCK:
        found = _MODELS.get(tokenizer)
        if found is None:
            found = _ModelGrammars(_build_tokenizer(tokenizer, vocab_size, eos_token_ids))
            _MODELS[tokenizer] = found
        return found


def _build_tokenizer(
    tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Collection[int]
) -> llguidance.LLTokenizer:
    # mlx-lm's TokenizerWrapper forwards to its tokenizer: transformers' fast tokenizers and
    # our CheckpointTokenizer both expose the `tokenizers` object as `backend_tokenizer`.
    backend = getattr(tokenizer, "backend_tokenizer", None)
    to_str = getattr(backend, "to_str", None)
    if not callable(to_str):
        raise InvalidRequest(
            "structured output needs a tokenizer.json (fast) tokenizer; this model has none",
            param="response_format",
        )
    eos = sorted(eos_token_ids)
    size = max(vocab_size, backend.get_vocab_size(with_added_tokens=True))  # type: ignore[union-attr]
    return llguidance.LLTokenizer(str(to_str()), n_vocab=size, eos_token=eos or None)


def compile_constraint(
    constraint: OutputConstraint,
    tokenizer: Tokenizer,
    vocab_size: int,
    eos_token_ids: Collection[int],
) -> CompiledGrammar:
    """Compile on the calling thread's watch, within MLXD_GRAMMAR_BYTES and
    MLXD_GRAMMAR_SECONDS. Raises InvalidRequest(param=constraint.param) naming the problem."""
    param = constraint.param
    size = len(constraint.schema.encode()) + len(constraint.prefix) + len(constraint.suffix)
    size += sum(len(repr(piece)) for choice in constraint.choices for piece in choice)
    limit = setting_int("grammar_bytes")
    if size > limit:
        raise InvalidRequest(
            f"{param}: the schema is {size} bytes, more than the {limit} allowed "
            "(MLXD_GRAMMAR_BYTES)",
            param=param,
        )
    models = _model_grammars(tokenizer, vocab_size, eos_token_ids)
    grammar = _lark(constraint, models.tokenizer)
    matcher = models.get(grammar)
    if matcher is None:
        matcher = _compile(grammar, models.tokenizer, param)
        models.put(grammar, matcher)
    start, end, close = _reasoning(constraint, models.tokenizer)
    return CompiledGrammar(
        matcher=matcher,
        tokenizer=models.tokenizer,
        mask_size=models.tokenizer.vocab_size,
        reasoning_start=start,
        reasoning_end=end,
        reasoning_open=constraint.reasoning_open and bool(end),
        param=param,
        end_tokens=tuple(sorted(eos_token_ids)),
        reasoning_close=close,
    )


def _lark(constraint: OutputConstraint, tokenizer: llguidance.LLTokenizer) -> str:
    """The grammar: prefix, the JSON value, suffix (markers as their special tokens); or one
    of the constraint's choices."""
    if constraint.choices:
        return _choices_lark(constraint, tokenizer)
    body = _json_body(constraint.schema, constraint.param)
    parts = [
        *_pieces(constraint.prefix, tokenizer),
        "answer",
        *_pieces(constraint.suffix, tokenizer),
    ]
    return llguidance.LLMatcher.grammar_from_lark(
        f"start: {' '.join(parts)}\nanswer: %json {body}\n"
    )


def _choices_lark(constraint: OutputConstraint, tokenizer: llguidance.LLTokenizer) -> str:
    """`start` is one of the choices; each JSON piece is its own %json rule."""
    rules: list[str] = []
    alternatives = []
    for i, choice in enumerate(constraint.choices):
        items: list[str] = []
        for k, piece in enumerate(choice):
            if piece.kind is PieceKind.TEXT:
                items += _pieces(piece.text, tokenizer)
            elif piece.kind is PieceKind.JSON:
                rules.append(f"j{i}_{k}: %json {_json_body(piece.text, constraint.param)}")
                items.append(f"j{i}_{k}")
            elif piece.options:
                items.append("(" + " | ".join(json.dumps(o) for o in piece.options) + ")")
            else:  # free text: bounded, and never "<", so it cannot run into the markers
                items.append(f"/[^<]{{0,{max(0, int(piece.max_chars))}}}/")
        alternatives.append(" ".join(items) or '""')
    start = "start: " + " | ".join(alternatives)
    return llguidance.LLMatcher.grammar_from_lark("\n".join([start, *rules]) + "\n")


def _json_body(schema_text: str, param: str) -> str:
    """The schema as llguidance's %json takes it: checked, bounded, compact layout."""
    try:
        schema = json.loads(schema_text)
    except (ValueError, RecursionError):
        raise InvalidRequest(f"{param}: the schema is not valid JSON", param=param) from None
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{param}: the schema must be a JSON object", param=param)
    if not has_finite_instance(schema):
        raise _no_instance(param)
    schema = with_default_bounds(schema, value_caps())
    schema["x-guidance"] = {**(schema.get("x-guidance") or {}), **JSON_LAYOUT}
    try:
        return json.dumps(schema, ensure_ascii=False)
    except (ValueError, RecursionError):
        raise InvalidRequest(f"{param}: the schema is nested too deeply", param=param) from None


def value_caps() -> ValueCaps:
    """The operator's caps on numbers and strings a schema leaves unbounded."""
    return ValueCaps(
        integer_digits=setting_int("grammar_integer_digits"),
        fraction_digits=setting_int("grammar_fraction_digits"),
        string_chars=setting_int("grammar_string_chars"),
    )


def _pieces(text: str, tokenizer: llguidance.LLTokenizer) -> list[str]:
    """Lark items for literal text: special tokens by id (<[5]>), the rest as strings."""
    items: list[str] = []
    pending = b""
    for token in tokenizer.tokenize_str(text, parse_special=True) if text else []:
        if tokenizer.is_special_token(token):
            if pending:
                items.append(json.dumps(pending.decode("utf-8", "replace")))
                pending = b""
            items.append(f"<[{token}]>")
        else:
            pending += tokenizer.decode_bytes([token])
    if pending:
        items.append(json.dumps(pending.decode("utf-8", "replace")))
    return items


def _compile(grammar: str, tokenizer: llguidance.LLTokenizer, param: str) -> llguidance.LLMatcher:
    """Validate the grammar where it can be stopped, then build its matcher here (the same
    compiler work, now known to fit the budgets) and check it can start an answer."""
    error = _validated(grammar, param)
    if error:
        raise InvalidRequest(f"{param}: {error}", param=param)
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=_LIMITS)
    if matcher.is_error():
        raise InvalidRequest(f"{param}: {_first_line(matcher.get_error())}", param=param)
    if not _can_start(matcher, tokenizer.vocab_size):
        raise _no_instance(param)
    return matcher


def _validated(grammar: str, param: str) -> str:
    """llguidance's error for the grammar ("" when valid), from the cache or a worker."""
    key = hashlib.sha256(grammar.encode()).digest()
    with _MODELS_LOCK:
        if key in _VERDICTS:
            _VERDICTS.move_to_end(key)
            return _VERDICTS[key]
    budget = setting_float("grammar_seconds")
    verdict = shared_pool().validate(grammar, budget)
    _raise_unanswered(verdict, budget, param)
    error = _first_line(verdict.message) if verdict.outcome is Outcome.INVALID else ""
    with _MODELS_LOCK:
        _VERDICTS[key] = error
        while len(_VERDICTS) > _CACHED_VERDICTS:
            _VERDICTS.popitem(last=False)
    return error


def _raise_unanswered(verdict: Verdict, budget: float, param: str) -> None:
    """The refusal for a verdict that is not llguidance's answer (budgets, shutdown)."""
    if verdict.outcome is Outcome.TIMEOUT:
        raise InvalidRequest(
            f"{param}: the schema took more than {budget:g} s to compile (MLXD_GRAMMAR_SECONDS)",
            param=param,
        )
    if verdict.outcome is Outcome.OUT_OF_MEMORY:
        mb = setting_int("grammar_memory_bytes") >> 20
        raise InvalidRequest(
            f"{param}: the schema needs more than {mb} MB to compile (MLXD_GRAMMAR_MEMORY_BYTES)",
            param=param,
        )
    if verdict.outcome is Outcome.STOPPED:
        raise EngineUnavailable("server is shutting down; grammars no longer compile")
    if verdict.outcome is Outcome.BUSY:
        raise EngineBusy(
            f"every grammar compiler stayed busy for {budget:g} s (MLXD_GRAMMAR_WORKERS); "
            "retry later"
        )


def _can_start(matcher: llguidance.LLMatcher, vocab_size: int) -> bool:
    """Some token can begin the answer (a grammar with no finite sentence has none)."""
    probe = matcher.deep_copy()
    words = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)
    probe.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
    return not probe.is_error() and bool(words.any())


def _no_instance(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"{param}: no finite JSON value satisfies the schema (a required property or item "
        "refers back to itself)",
        param=param,
    )


def _first_line(error: str) -> str:
    line = error.strip().splitlines()[0] if error.strip() else "the schema cannot be compiled"
    return line if len(line) <= _ERROR_CHARS else line[: _ERROR_CHARS - 3] + "..."


def _reasoning(
    constraint: OutputConstraint, tokenizer: llguidance.LLTokenizer
) -> tuple[int | None, bytes, int | None]:
    """(the token opening reasoning, the text closing it, the token closing it), each token
    None unless the marker is one token."""
    if constraint.reasoning is None:
        return None, b"", None
    start, end = constraint.reasoning
    opener = tokenizer.tokenize_str(start, parse_special=True)
    closer = tokenizer.tokenize_str(end, parse_special=True)
    one = (opener[0] if len(opener) == 1 else None), (closer[0] if len(closer) == 1 else None)
    return one[0], end.encode(), one[1]
